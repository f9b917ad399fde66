#pragma once
// The faults that take a whole host or the supervisor away (launcher-internal to the drill
// module; live_drill.cpp dispatches to them once the run trains steadily):
//   kill-host       SIGKILL the agent and every worker on the host (over SSH when remote);
//   partition-host  cut the host off (user's commands, or opt-in firewall rules), wait for the
//                   recovery, heal, then prove nothing of the run is left on it;
//   kill-supervisor SIGKILL the supervisor, prove the agents fence, run `dtrain resume --detach`
//                   and follow the resumed run until it trains again.

#include <functional>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "launcher/base/result.h"
#include "launcher/drill/live_drill.h"
#include "launcher/drill/run_view.h"

namespace dtrain::drill {

struct FollowResult {
  bool recovered = false;            ///< a matching recovery.completed was logged
  bool run_ended = false;            ///< run.finished, or (unless allowed) the supervisor is gone
  std::optional<std::string> error;  ///< the run log could not be read
};

/// Follows the run's events from `events_before` until a recovery.completed (for which
/// `is_recovery`, when set, holds), the run's end, a cancel or `deadline`. With
/// `supervisor_may_be_gone` a dead supervisor does not end the follow (kill-supervisor).
FollowResult follow_recovery(LiveRun& run, size_t events_before, Deadline deadline, bool supervisor_may_be_gone,
                             const std::function<bool(const events::RecoveryCompleted&)>& is_recovery);

Result<FaultRecord> inject_host_fault(LiveRun& run, const Fault& fault, const Ready& ready, Deadline deadline,
                                      const Say& say);

Result<FaultRecord> inject_supervisor_kill(LiveRun& run, const Fault& fault, const Ready& ready, Deadline deadline,
                                           const Say& say);

}  // namespace dtrain::drill
