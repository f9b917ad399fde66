#pragma once
// CheckpointRequests: checkpoints asked of every worker before a Slurm time limit — on SIGUSR1
// (sbatch --signal=B:USR1@T) or when checkpoint.before_walltime is due — at one step that all
// ranks reach (ckpt.request in the worker protocol, worker/contract/wire.h). It owns the watch of
// the job's time left; it reads the supervisor and rank progress and sends through the agent
// links. What it asked goes back to the driver, which records it.

#include <cstdint>
#include <optional>
#include <string>

#include <spdlog/logger.h>

#include "launcher/events/events.h"
#include "launcher/run/agent_link.h"
#include "launcher/run/rank_progress.h"
#include "launcher/run/slurm_time_limit.h"
#include "launcher/supervisor/supervisor.h"

namespace dtrain::run {

class CheckpointRequests {
 public:
  /// Everything referenced must outlive it.
  CheckpointRequests(const spec::JobSpec& spec, const supervisor::Supervisor& supervisor,
                     const RankProgressTable& progress, const AgentLinks& links);

  /// Asks every worker that speaks the worker protocol for a checkpoint at one step all ranks
  /// reach. What it asked (ckpt.requested), for the driver to record.
  events::CheckpointRequested request(const std::string& reason);
  /// checkpoint.before_walltime: the reason to ask, once, when it is due (called at each tick;
  /// the job's time left is looked up off the loop).
  std::optional<std::string> walltime_due(int64_t now_ms, spdlog::logger& log);

 private:
  const spec::JobSpec& spec_;
  const supervisor::Supervisor& supervisor_;
  const RankProgressTable& progress_;
  const AgentLinks& links_;
  SlurmTimeLimitWatch walltime_;
};

}  // namespace dtrain::run
