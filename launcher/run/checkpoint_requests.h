#pragma once
// CheckpointRequests: checkpoints asked of every worker before a Slurm time limit — on SIGUSR1
// (sbatch --signal=B:USR1@T) or when checkpoint.before_walltime is due — or before a preemption
// (SIGTERM, `dtrain stop --checkpoint`), at one step that all ranks reach (ckpt.request in the
// worker protocol, worker/contract/wire.h). It owns the watch of the job's time left and of a
// preemption's wait for its checkpoint; it reads the supervisor and rank progress and sends
// through the agent links. What it asked goes back to the driver, which records it.

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

  /// A preemption begins: asks every worker that can hear it for a checkpoint (as request())
  /// and starts the wait for it, up to preempt_grace. What it asked, for the driver to record.
  /// Workers that could not be asked get the whole preempt_grace as their SIGTERM grace.
  events::CheckpointRequested begin_preemption(const std::string& reason, int64_t now_ms);
  bool preempting() const { return preemption_.has_value(); }
  /// The stop that ends a preemption, once it is due: a checkpoint of the asked step (or a
  /// later one) committed by every rank, or preempt_grace passed, or nobody could be asked.
  /// Called at each tick; returns it once. `cut_short`: the operator insists (a second signal):
  /// due now, whatever was saved.
  std::optional<supervisor::StopRequested> preemption_due(int64_t now_ms, const std::string& cut_short = "");

 private:
  const spec::JobSpec& spec_;
  const supervisor::Supervisor& supervisor_;
  const RankProgressTable& progress_;
  const AgentLinks& links_;
  SlurmTimeLimitWatch walltime_;
  struct Preemption {
    std::string reason;
    int64_t step = -1;        ///< asked of every rank
    int asked = 0;            ///< ranks asked; 0: nothing to wait for
    int64_t began_ms = 0;     ///< monotonic
    bool stop_sent = false;
  };
  std::optional<Preemption> preemption_;
};

}  // namespace dtrain::run
