// CheckpointRequests (checkpoint_requests.h): SIGUSR1 (sbatch --signal=B:USR1@T) or
// checkpoint.before_walltime makes the supervisor ask every worker for a checkpoint
// (ckpt.request in the worker protocol, worker/contract/wire.h) at one step all ranks reach.

#include "launcher/run/checkpoint_requests.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "launcher/base/strings.h"
#include "launcher/proto/messages.h"
#include "worker/contract/wire.h"

namespace dtrain::run {

CheckpointRequests::CheckpointRequests(const spec::JobSpec& spec, const supervisor::Supervisor& supervisor,
                                       const RankProgressTable& progress, const AgentLinks& links)
    : spec_(spec),
      supervisor_(supervisor),
      progress_(progress),
      links_(links),
      walltime_(spec.checkpoint.before_walltime) {}

events::CheckpointRequested CheckpointRequests::request(const std::string& reason) {
  const int gen = supervisor_.generation();
  int64_t newest_step = -1;
  for (const supervisor::RankStatus& status : supervisor_.ranks()) newest_step = std::max(newest_step, status.step);
  const double fastest_step_ms = progress_.fastest_step_ms(supervisor_);
  // Every rank must save the same step (a checkpoint is complete only with every shard of it).
  // Beats come at most once per heartbeat.interval, so a rank may be that far past its last
  // beat: the step asked for lies two intervals of the fastest rank's steps ahead, and two more.
  int64_t margin = 2;
  if (fastest_step_ms > 0) {
    margin += static_cast<int64_t>(std::ceil(2.0 * static_cast<double>(spec_.heartbeat.interval.count()) / fastest_step_ms));
  }
  const int64_t at_step = newest_step < 0 ? margin : newest_step + margin;
  nlohmann::json request = proto::to_json(proto::CheckpointRequest{at_step, reason});
  int asked = 0;
  for (const plan::RankSlot& slot : supervisor_.current_plan().ranks) {
    auto link = links_.find(slot.host);
    if (link == links_.end() || link->second->lost) continue;
    // Workers that never spoke the worker protocol (plain scripts) could not hear it.
    const RankProgress* progress = progress_.find(slot.rank);
    if (!progress || !progress->speaks_protocol) continue;
    link->second->send(proto::ToWorkerRequest{gen, slot.rank, request});
    ++asked;
  }
  return events::CheckpointRequested{gen, reason, at_step, asked};
}

events::CheckpointRequested CheckpointRequests::begin_preemption(const std::string& reason, int64_t now_ms) {
  events::CheckpointRequested asked = request(reason);
  preemption_ = Preemption{reason, asked.step, asked.ranks, now_ms, false};
  return asked;
}

std::optional<supervisor::StopRequested> CheckpointRequests::preemption_due(int64_t now_ms, const std::string& cut_short) {
  if (!preemption_ || preemption_->stop_sent) return std::nullopt;
  Preemption& preemption = *preemption_;
  const int64_t newest = supervisor_.latest_checkpoint_step();
  const std::string asked_step = "the checkpoint asked at step " + std::to_string(preemption.step);
  const std::string newest_text =
      newest >= 0 ? "the newest complete one is step " + std::to_string(newest) : "no checkpoint is complete";
  std::string outcome;
  int64_t worker_grace_ms = 0;  // stop_grace: the workers that could save have saved (or had their time)
  if (preemption.asked == 0) {
    outcome = "no worker speaks the worker protocol, so none could be asked to save; each gets SIGTERM and " +
              format_duration(spec_.preempt_grace) + " (preempt_grace) to save in its own handler";
    worker_grace_ms = spec_.preempt_grace.count();
  } else if (newest >= preemption.step) {
    outcome = "checkpoint step " + std::to_string(newest) + " saved by every rank";
  } else if (!cut_short.empty()) {
    outcome = "the wait for " + asked_step + " was cut short (" + cut_short + "); " + newest_text;
  } else if (now_ms - preemption.began_ms >= spec_.preempt_grace.count()) {
    outcome = asked_step + " was not complete within " + format_duration(spec_.preempt_grace) + " (preempt_grace); " +
              newest_text;
  } else {
    return std::nullopt;
  }
  preemption.stop_sent = true;
  return supervisor::StopRequested{preemption.reason + ": " + outcome, true, worker_grace_ms};
}

std::optional<std::string> CheckpointRequests::walltime_due(int64_t now_ms, spdlog::logger& log) {
  if (!walltime_.due(now_ms, log)) return std::nullopt;
  return "checkpoint.before_walltime: " + format_duration(spec_.checkpoint.before_walltime) +
         " before the Slurm time limit";
}

}  // namespace dtrain::run
