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

std::optional<std::string> CheckpointRequests::walltime_due(int64_t now_ms, spdlog::logger& log) {
  if (!walltime_.due(now_ms, log)) return std::nullopt;
  return "checkpoint.before_walltime: " + format_duration(spec_.checkpoint.before_walltime) +
         " before the Slurm time limit";
}

}  // namespace dtrain::run
