#include "launcher/metrics/goodput.h"

#include <algorithm>
#include <cstdio>
#include <chrono>

#include "launcher/events/event.h"

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

void GoodputTracker::add(const LoggedEvent& logged, int64_t wall_ms) {
  using namespace events;
  // The generation the supervisor stamped on the event (its own "gen" where the struct has one).
  const int generation = logged.gen.value_or(generation_);
  if (std::holds_alternative<RunSubmitted>(logged.event)) {
    if (phase_ != Phase::before_submit) return;
    phase_ = Phase::launch;
    since_ms_ = submitted_ms_ = wall_ms;
    return;
  }
  if (phase_ == Phase::before_submit || phase_ == Phase::finished) return;

  // A failure nothing recovers from, or a stop: the end of training.
  auto shut_down = [&] { move_to(Phase::shutdown, wall_ms); };
  auto silent_before = [&](int64_t silent_ms) { pending_silent_ms_ = std::max(pending_silent_ms_, silent_ms); };
  std::visit(Overloaded{
      [&](const RunFinished&) {
        move_to(Phase::finished, wall_ms);
        finished_ms_ = wall_ms;
      },
      [&](const PlanGeneration&) { generation_ = std::max(generation_, generation); },
      [&](const GenerationStepped& stepped) { first_step(generation, stepped.step, wall_ms); },
      [&](const RecoveryCompleted& completed) { recovery_completed(completed, generation, wall_ms); },
      [&](const CommReady&) {
        if (!precise_) first_step(generation, 0, wall_ms);
      },
      [&](const events::RunState& state) {
        if (!precise_ && state.state == "running") first_step(generation, 0, wall_ms);
      },
      [&](const WorkerHang& hang) { silent_before(hang.silent_ms); },
      [&](const HostLost& lost) {
        if (lost.silent_ms) silent_before(*lost.silent_ms);
      },
      [&](const FailureDetected& detected) { failure_detected(detected, wall_ms); },
      [&](const RecoveryStarted& started) { restarts_ = std::max(restarts_, started.restarts); },
      [&](const RunResumed&) {
        // The supervisor was away; its workers were stopped: a restart.
        if (phase_ == Phase::running || phase_ == Phase::launch) {
          move_to(Phase::restart, wall_ms);
          failed_first_step_ = -1;
        }
      },
      [&](const FailureBudgetExhausted&) { shut_down(); },
      [&](const FailureCrashLoop&) { shut_down(); },
      [&](const FailureUnrecoverable&) { shut_down(); },
      [&](const RunStopRequested&) { shut_down(); },
      [&](const WorkerExit& exit) {
        // Training is over: the ranks finished their steps.
        if (phase_ == Phase::running && generation == generation_ && exit.code == 0) move_to(Phase::shutdown, wall_ms);
      },
      [&](const CheckpointCommitted& committed) {
        double& stall = checkpoint_seconds_[{generation, committed.step}];
        stall = std::max(stall, std::max(0.0, committed.stall_seconds.value_or(committed.seconds)));
      },
      [](const auto&) {},
  }, logged.event);
}

void GoodputTracker::recovery_completed(const events::RecoveryCompleted& completed, int generation, int64_t wall_ms) {
  // The step that completed the recovery is the first one past the resume point.
  first_step(generation, completed.resume_step + 1, wall_ms);
  if (completed.steps_lost > 0 && failed_first_step_ >= 0 && completed.last_step > failed_first_step_) {
    double step_ms = failed_running_ms_ / static_cast<double>(completed.last_step - failed_first_step_);
    redone_ms_ += step_ms * static_cast<double>(completed.steps_lost);
    redone_steps_ += completed.steps_lost;
  }
}

void GoodputTracker::failure_detected(const events::FailureDetected& detected, int64_t wall_ms) {
  if (phase_ == Phase::running) {
    move_to(Phase::restart, wall_ms);
    // The failure happened before it was detected: that much of the generation's running
    // time was not training.
    int64_t detection = pending_silent_ms_ >= 0 ? pending_silent_ms_ : detected.latency_ms.value_or(0);
    double moved = std::min(static_cast<double>(std::max<int64_t>(0, detection)), running_in_generation_ms_);
    running_ms_ -= moved;
    detection_ms_ += moved;
    failed_running_ms_ = running_in_generation_ms_ - moved;
    failed_first_step_ = generation_first_step_;
  } else if (phase_ == Phase::launch) {
    move_to(Phase::restart, wall_ms);
    failed_first_step_ = -1;
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

Goodput goodput_from_events(const std::vector<LoggedEvent>& events, std::optional<int64_t> now_wall_ms) {
  bool precise = std::any_of(events.begin(), events.end(), [](const LoggedEvent& event) {
    return std::holds_alternative<events::GenerationStepped>(event.event);
  });
  GoodputTracker tracker(precise);
  int64_t last_ms = 0;
  for (const LoggedEvent& event : events) {
    std::optional<int64_t> wall_ms = event.wall_ms();
    if (!wall_ms) continue;
    last_ms = std::max(last_ms, *wall_ms);
    tracker.add(event, *wall_ms);
  }
  return tracker.at(now_wall_ms.value_or(last_ms));
}

}  // namespace dtrain::metrics
