#pragma once
// The recovery policy's one decision (docs/architecture.md §4): given a failure, what came before it and
// the spec — restart in place, replace the lost host with a spare, shrink the world, or give
// up — and why, in a sentence a person reads in events.jsonl and the end-of-run summary. A pure
// function: the supervisor's event handlers gather the facts and carry the decision out.

#include <optional>
#include <set>
#include <string>

#include "launcher/base/exit_code.h"
#include "launcher/plan/rank_plan.h"
#include "launcher/spec/job_spec.h"

namespace dtrain::supervisor {

struct FailureFacts {
  std::string host;        ///< where it happened; "" when not tied to a host
  bool host_lost = false;  ///< the host itself is gone (dead, cut off): it cannot be used again
  int host_failures = 0;   ///< failures of this host in this run, this one included
  int world_size = 0;      ///< of the generation that failed
  /// One rank's process failed (it exited, hung or misbehaved) on a host that is still there:
  /// what an in-place recovery can repair.
  bool single_rank = false;
  /// The failed generation's plan: a lost host's ranks can move to a spare in place when every
  /// other rank keeps its host and coordinates in the next plan.
  const plan::RankPlan* plan = nullptr;
  int rank = -1;           ///< the failed rank (single_rank)
};

struct FailureHistory {
  std::set<std::string> excluded;  ///< hosts excluded before this failure
  int restarts_in_window = 0;      ///< restarts within elastic.restart_window before this one
  /// An in-place recovery of this failure (or the one it followed from) was tried and could not
  /// finish: restart every worker instead.
  bool in_place_failed = false;
};

/// in_place: the same plan; only the failed rank's process is replaced and the others keep
/// running (elastic.in_place). Counts against the restart budget like restart.
enum class RecoveryAction { restart, replace, shrink, give_up, in_place };
const char* to_string(RecoveryAction action);

struct RecoveryDecision {
  RecoveryAction action = RecoveryAction::give_up;
  std::string why;
  /// Exclude `FailureFacts::host` from every later plan (it was lost, or failed
  /// elastic.exclude_after times and the job can go on without it).
  bool exclude_host = false;
  /// The host failed elastic.exclude_after times but no plan can spare it: restarted in place.
  bool exclusion_refused = false;
  /// The plan of the next generation (replace, shrink; restart and in_place: the same hosts,
  /// or for a lost host in place, a spare in its place).
  std::optional<plan::RankPlan> next_plan;
  /// in_place: the ranks whose processes are started anew (the failed rank, or every rank of
  /// the lost host, on the spare); every other rank is carried over.
  std::vector<int> replaced_ranks;
  /// give_up: hosts_lost (no plan without the excluded hosts) or job_failed (budget spent).
  ExitCode exit_code = ExitCode::job_failed;
};

RecoveryDecision decide_recovery(const FailureFacts& failure, const FailureHistory& history,
                                 const spec::JobSpec& spec);

}  // namespace dtrain::supervisor
