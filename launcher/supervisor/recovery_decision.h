#pragma once
// The recovery policy's decisions (docs/architecture.md §4). decide_recovery is the one for a failure:
// given the failure, what came before it and the spec — restart, replace the lost host with a
// spare, shrink the world, repair in place, or give up — and why, in a sentence a person reads in
// events.jsonl and the end-of-run summary. Beside it, every other rule that ends or continues a
// run: the crash loop, the spawn failure, a loss before the first generation, hosts that never
// confirm a stop, and the end of an in-place attempt. Pure functions: the supervisor's event
// handlers gather the facts and carry the decisions out.

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "launcher/base/exit_code.h"
#include "launcher/plan/rank_plan.h"
#include "launcher/spec/job_spec.h"
#include "launcher/supervisor/supervisor_types.h"

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
  /// It spends one restart of elastic.max_restarts: a restart, or an in-place repair of a rank.
  /// Membership changes (replace, shrink, a lost host's spare in place) do not.
  bool uses_restart = false;
};

RecoveryDecision decide_recovery(const FailureFacts& failure, const FailureHistory& history,
                                 const spec::JobSpec& spec);

/// The restarts that still count against elastic.max_restarts at `now_ms`: forgets from
/// `restart_times_ms` (monotonic) those older than elastic.restart_window (0: none expire).
int restarts_in_window(std::vector<int64_t>& restart_times_ms, int64_t now_ms, const spec::JobSpec& spec);

/// A worker that cannot be spawned: the same command will not start next time either, so the
/// run ends at once (exit job_failed), whatever budget is left.
RecoveryDecision decide_spawn_failure(const RootCause& cause);

/// Hosts of the plan were lost before the first generation started (`lost`, in order; already
/// among `excluded` or not): start without them when elastic.min_hosts is set and a plan without
/// every excluded host exists (`next_plan`: replace when spares keep `world_size`, else shrink),
/// else give up with exit infra and the planner's reason. One decision for any number of losses:
/// hosts lost while the others connect are decided together (Supervisor::lose_host_before_start).
RecoveryDecision decide_loss_while_connecting(const std::vector<std::string>& lost, const std::set<std::string>& excluded,
                                              int world_size, const spec::JobSpec& spec);

/// Whether a start without `excluded` may still be possible, by counting alone (hosts and spares
/// not excluded against elastic.min_hosts): cheap enough to ask at every loss while connecting,
/// where the full plan waits for the losses to settle. False means give up now.
bool may_start_without(const std::set<std::string>& excluded, const spec::JobSpec& spec);

/// The plan of the next generation after hosts were excluded while the failed generation was
/// stopping (lost, or silent past the stop deadline): the plan decided before is void.
Result<plan::RankPlan> replan_without(const std::set<std::string>& excluded, const spec::JobSpec& spec);

/// Past the stop deadline (stop_grace + heartbeat.timeout after the stop was sent), hosts that
/// did not confirm the release are given up on: the run ends or recovers without them.
int64_t stop_deadline_ms(int64_t stop_sent_ms, const spec::JobSpec& spec);
/// When the run recovers, those hosts are excluded from the next plan: their workers may still
/// run there. When it ends, there is no next plan.
bool exclude_unconfirmed_hosts(bool recovering);

// ---- the crash loop --------------------------------------------------------------------------

/// What the generation being ended achieved.
struct GenerationProgress {
  int64_t start_step = -1;         ///< the step it resumed from
  int64_t newest_step = -1;        ///< the newest step its ranks reported; -1: none reported one
  int64_t start_checkpoint = -1;   ///< the newest committed checkpoint when it started
  int64_t latest_checkpoint = -1;  ///< the newest committed checkpoint now
  int64_t ran_ms = 0;              ///< from its start to its failure
  /// The heartbeat.hang_timeout in force when it ended (hang_timeouts.h); 0: the spec's initial one.
  int64_t hang_timeout_ms = 0;
};

struct CrashLoopVerdict {
  int generations_without_progress = 0;  ///< counting this generation
  /// Set when the run ends as a crash loop (exit crash_loop): the detail for the event and the
  /// reason.
  std::optional<std::string> give_up;
};

/// elastic.progress_window, or when auto: 2 × the heartbeat.hang_timeout in force
/// (`hang_timeout_in_force`; 0: heartbeat.initial_hang_timeout()).
Millis progress_window(const spec::JobSpec& spec, Millis hang_timeout_in_force = Millis(0));

/// Whether `generation` made progress: its step advanced, a newer checkpoint was committed, or
/// — when neither can be known — it ran at least progress_window().
bool made_progress(const GenerationProgress& generation, const spec::JobSpec& spec);

/// elastic.crash_loop_after consecutive generations without progress end the run.
/// `without_progress_before`: the count before `generation` ended.
CrashLoopVerdict judge_crash_loop(const GenerationProgress& generation, int without_progress_before,
                                  const spec::JobSpec& spec);

// ---- the end of an in-place attempt ------------------------------------------------------------

/// A failure while an in-place recovery is under way ends that attempt. A rank's failure (a
/// survivor that cannot rejoin: a script that does not support it, a shard without a live
/// replica) is a consequence: the same recovery falls back to a restart of every worker, with no
/// second restart counted. A lost host is news: decide_recovery decides it, with
/// FailureHistory::in_place_failed set.
struct InPlaceEnd {
  bool fall_back = false;
  std::string why;  ///< "rank 3 on h1: worker.exit (exit code 1)"
};
InPlaceEnd end_in_place_on_failure(const RootCause& cause, bool host_lost);

/// The attempt past elastic.in_place_timeout falls back: why, naming the killed rank whose exit
/// was never seen or the ranks without a communicator.
std::string in_place_timeout_reason(bool awaiting_exit, const std::vector<RankStatus>& ranks,
                                    const spec::JobSpec& spec);

/// A host's carry-over answer: the ranks of `plan` on `host`, other than `replaced`, that it did
/// not carry over had ended already, and the attempt falls back (the reason); nullopt: all there.
std::optional<std::string> carry_over_shortfall(const plan::RankPlan& plan, const std::vector<int>& replaced,
                                                const std::string& host, const std::vector<int>& carried, int gen);

}  // namespace dtrain::supervisor
