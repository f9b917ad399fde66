#include "launcher/metrics/goodput.h"

#include <algorithm>
#include <cstdio>
#include <chrono>

#include "launcher/events/event_catalogue.h"
#include "launcher/runlog/event_log.h"
#include "launcher/base/json_fields.h"

namespace dtrain::metrics {

using nlohmann::json;

json Goodput::to_json() const {
  return {{"ratio", ratio()},
          {"wall_seconds", wall_seconds},
          {"productive_seconds", productive_seconds},
          {"lost_seconds",
           {{"launch", launch_seconds},
            {"detection", detection_seconds},
            {"restart", restart_seconds},
            {"redone_steps", redone_steps_seconds},
            {"checkpoint_stall", checkpoint_stall_seconds},
            {"shutdown", shutdown_seconds}}},
          {"redone_steps", redone_steps},
          {"restarts", restarts},
          {"finished", finished}};
}

double& GoodputTracker::bucket(Phase phase) {
  switch (phase) {
    case Phase::launch: return launch_ms_;
    case Phase::running: return running_ms_;
    case Phase::restart: return restart_ms_;
    case Phase::shutdown: return shutdown_ms_;
    default: break;
  }
  static double ignored = 0;
  return ignored;
}

void GoodputTracker::move_to(Phase phase, int64_t wall_ms) {
  if (phase_ == Phase::before_submit || phase_ == Phase::finished) return;
  // Events are written in order, but the clock may step back between two of them (NTP): never
  // a negative interval.
  int64_t elapsed = std::max<int64_t>(0, wall_ms - since_ms_);
  bucket(phase_) += static_cast<double>(elapsed);
  if (phase_ == Phase::running) running_in_generation_ms_ += static_cast<double>(elapsed);
  since_ms_ = std::max(since_ms_, wall_ms);
  phase_ = phase;
}

void GoodputTracker::first_step(int generation, int64_t step, int64_t wall_ms) {
  if (phase_ != Phase::launch && phase_ != Phase::restart) return;
  if (generation < generation_) return;  // a late marker of an older generation
  move_to(Phase::running, wall_ms);
  generation_ = generation;
  generation_first_step_ms_ = wall_ms;
  generation_first_step_ = step;
  running_in_generation_ms_ = 0;
  pending_silent_ms_ = -1;
}

void GoodputTracker::add(const json& event, int64_t wall_ms) {
  const std::string name = json_string(event, "ev");
  const int generation = static_cast<int>(json_int(event, "gen").value_or(generation_));
  if (name == events::kRunSubmitted) {
    if (phase_ != Phase::before_submit) return;
    phase_ = Phase::launch;
    since_ms_ = submitted_ms_ = wall_ms;
    return;
  }
  if (phase_ == Phase::before_submit || phase_ == Phase::finished) return;

  if (name == events::kRunFinished) {
    move_to(Phase::finished, wall_ms);
    finished_ms_ = wall_ms;
  } else if (name == events::kPlanGeneration) {
    generation_ = std::max(generation_, generation);
  } else if (name == events::kGenerationStepped) {
    first_step(generation, json_int(event, "step").value_or(0), wall_ms);
  } else if (name == events::kRecoveryCompleted) {
    // The step that completed the recovery is the first one past the resume point.
    first_step(generation, json_int(event, "resume_step").value_or(-1) + 1, wall_ms);
    int64_t lost = json_int(event, "steps_lost").value_or(0);
    int64_t last_step = json_int(event, "last_step").value_or(-1);
    if (lost > 0 && failed_first_step_ >= 0 && last_step > failed_first_step_) {
      double step_ms = failed_running_ms_ / static_cast<double>(last_step - failed_first_step_);
      redone_ms_ += step_ms * static_cast<double>(lost);
      redone_steps_ += lost;
    }
  } else if (!precise_ && (name == events::kCommReady ||
                           (name == events::kRunState && json_string(event, "state") == "running"))) {
    first_step(generation, 0, wall_ms);
  } else if (name == events::kWorkerHang || name == events::kHostLost) {
    if (std::optional<int64_t> silent = json_int(event, "silent_ms")) {
      pending_silent_ms_ = std::max(pending_silent_ms_, *silent);
    }
  } else if (name == events::kFailureDetected) {
    if (phase_ == Phase::running) {
      move_to(Phase::restart, wall_ms);
      // The failure happened before it was detected: that much of the generation's running
      // time was not training.
      int64_t detection = pending_silent_ms_ >= 0 ? pending_silent_ms_ : json_int(event, "latency_ms").value_or(0);
      double moved = std::min(static_cast<double>(std::max<int64_t>(0, detection)), running_in_generation_ms_);
      running_ms_ -= moved;
      detection_ms_ += moved;
      failed_running_ms_ = running_in_generation_ms_ - moved;
      failed_first_step_ = generation_first_step_;
    } else if (phase_ == Phase::launch) {
      move_to(Phase::restart, wall_ms);
      failed_first_step_ = -1;
    }
  } else if (name == events::kRecoveryStarted) {
    restarts_ = std::max(restarts_, static_cast<int>(json_int(event, "restarts").value_or(restarts_ + 1)));
  } else if (name == events::kRunResumed) {
    // The supervisor was away; its workers were stopped: a restart.
    if (phase_ == Phase::running || phase_ == Phase::launch) {
      move_to(Phase::restart, wall_ms);
      failed_first_step_ = -1;
    }
  } else if (name == events::kFailureBudgetExhausted || name == events::kFailureCrashLoop ||
             name == events::kFailureUnrecoverable || name == events::kRunStopRequested) {
    move_to(Phase::shutdown, wall_ms);
  } else if (name == events::kWorkerExit && phase_ == Phase::running && generation == generation_ &&
             json_int(event, "code") == 0) {
    move_to(Phase::shutdown, wall_ms);  // training is over: the ranks finished their steps
  } else if (name == events::kCheckpointCommitted) {
    std::optional<double> seconds = json_number(event, "stall_seconds");
    if (!seconds) seconds = json_number(event, "seconds");
    double& stall = checkpoint_seconds_[{generation, json_int(event, "step").value_or(-1)}];
    stall = std::max(stall, std::max(0.0, seconds.value_or(0.0)));
  }
}

Goodput GoodputTracker::at(int64_t now_wall_ms) const {
  GoodputTracker copy = *this;
  int64_t end_ms = phase_ == Phase::finished ? finished_ms_ : std::max(now_wall_ms, since_ms_);
  if (phase_ == Phase::before_submit) return {};
  copy.move_to(Phase::finished, end_ms);

  Goodput result;
  result.finished = phase_ == Phase::finished;
  result.restarts = restarts_;
  result.wall_seconds = static_cast<double>(end_ms - submitted_ms_) / 1000.0;
  double stall_ms = 0;
  for (const auto& [key, seconds] : checkpoint_seconds_) stall_ms += seconds * 1000.0;
  // Redone steps and stalls happened inside running time: never more than there was of it.
  double running = copy.running_ms_;
  double redone = std::min(copy.redone_ms_, running);
  double stalls = std::min(stall_ms, running - redone);
  result.productive_seconds = (running - redone - stalls) / 1000.0;
  result.redone_steps_seconds = redone / 1000.0;
  result.redone_steps = redone_steps_;
  result.checkpoint_stall_seconds = stalls / 1000.0;
  result.launch_seconds = copy.launch_ms_ / 1000.0;
  result.detection_seconds = copy.detection_ms_ / 1000.0;
  result.restart_seconds = copy.restart_ms_ / 1000.0;
  result.shutdown_seconds = copy.shutdown_ms_ / 1000.0;
  return result;
}

Goodput goodput_from_events(const std::vector<json>& events, std::optional<int64_t> now_wall_ms) {
  bool precise = std::any_of(events.begin(), events.end(),
                             [](const json& event) { return json_string(event, "ev") == events::kGenerationStepped; });
  GoodputTracker tracker(precise);
  int64_t last_ms = 0;
  for (const json& event : events) {
    std::optional<int64_t> wall_ms = event_wall_ms(event);
    if (!wall_ms) continue;
    last_ms = std::max(last_ms, *wall_ms);
    tracker.add(event, *wall_ms);
  }
  return tracker.at(now_wall_ms.value_or(last_ms));
}

}  // namespace dtrain::metrics
