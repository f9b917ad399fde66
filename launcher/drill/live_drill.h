#pragma once
// One fault against a live run: wait until it trains steadily (or reaches --at-step), inject
// the fault from outside, log drill.injected, and follow the run's events until it has
// recovered, ended, or the deadline passed. Grading is left to grade_fault().

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "launcher/base/result.h"
#include "launcher/drill/fault.h"
#include "launcher/drill/grading.h"
#include "launcher/drill/live_run.h"
#include "launcher/drill/run_view.h"

namespace dtrain::drill {

/// What one injection left to grade.
struct FaultRecord {
  Injection injection;
  /// The run's events from the injection until the follow ended, oldest first.
  std::vector<LoggedEvent> events_after;
  /// Processes of the hit generation still alive when the follow ended (after a short grace).
  std::vector<int> surviving_pids;
  bool recovered = false;   ///< a recovery.completed followed the injection
  bool run_ended = false;   ///< the run ended (or lost its supervisor) while followed
  std::string state_after;  ///< state.json "state" when the follow ended
  /// What the drill itself saw instead of a failure.detected (kill-supervisor: every agent
  /// fenced), and when.
  std::optional<int64_t> detected_wall_ms;
  std::string detected_by;
  /// What the drill verified on the hosts itself (host faults: nothing left on the host).
  std::vector<CheckResult> checks;

  /// The grading context for this record (final state, survivors, the drill's own checks).
  GradeContext context() const;
};

/// Checks that `fault` fits the run (a rank or host that exists, a kind that can be injected
/// live, partition settings). Errors are user errors, except kill-supervisor of a run
/// supervised from another machine (infra: the drill cannot reach it).
Status check_fault_fits(const LiveRun& run, const Fault& fault);

/// Waits, injects, follows (see the file comment). Errors when the drill itself cannot go on:
/// the run ended or never trained before the fault could be injected, the signal or the
/// checkpoint damage failed, the deadline passed before injection, or a cancel was requested.
Result<FaultRecord> inject_and_follow(LiveRun& run, const Fault& fault, Deadline deadline, const Say& say);

/// Follows the run until it ends (run.finished or supervisor gone) or `deadline`; returns its
/// final state.json "state" ("running" if it did not end in time).
std::string wait_for_run_end(LiveRun& run, Deadline deadline);

}  // namespace dtrain::drill
