#include "launcher/supervisor/recovery_decision.h"

#include <vector>

#include "launcher/base/duration.h"

namespace dtrain::supervisor {

const char* to_string(RecoveryAction action) {
  switch (action) {
    case RecoveryAction::restart: return "restart";
    case RecoveryAction::replace: return "replace";
    case RecoveryAction::shrink: return "shrink";
    case RecoveryAction::give_up: return "give_up";
    case RecoveryAction::in_place: return "in-place";
  }
  return "give_up";
}

namespace {

/// The ranks of `lost` when `next` puts every one of them on one spare and leaves every other
/// rank where it was (host, local rank, coordinates): then only those need new processes. Empty
/// when the plans differ in any other way.
std::vector<int> ranks_moved_to_spare(const plan::RankPlan& current, const plan::RankPlan& next, const std::string& lost) {
  if (current.world_size != next.world_size || current.ranks.size() != next.ranks.size() ||
      current.data != next.data || current.tensor != next.tensor || current.pipeline != next.pipeline ||
      current.grad_accum != next.grad_accum) {
    return {};
  }
  std::vector<int> moved;
  for (size_t i = 0; i < current.ranks.size(); ++i) {
    const plan::RankSlot& was = current.ranks[i];
    const plan::RankSlot& will = next.ranks[i];
    bool same_coordinates = was.local_rank == will.local_rank && was.dp == will.dp && was.pp == will.pp && was.tp == will.tp;
    if (!same_coordinates) return {};
    if (was.host == lost) {
      if (will.host == lost) return {};
      moved.push_back(static_cast<int>(i));
    } else if (was.host != will.host) {
      return {};
    }
  }
  return moved;
}

}  // namespace

RecoveryDecision decide_recovery(const FailureFacts& failure, const FailureHistory& history,
                                 const spec::JobSpec& spec) {
  RecoveryDecision decision;
  std::vector<std::string> without(history.excluded.begin(), history.excluded.end());
  auto plan_without = [&](bool with_this_host_excluded) {
    std::vector<std::string> hosts = without;
    if (with_this_host_excluded) hosts.push_back(failure.host);
    return plan::make_plan(spec, hosts);
  };
  const int exclude_after = spec.elastic.exclude_after;
  bool repeat_offender = !failure.host_lost && !failure.host.empty() && exclude_after > 0 &&
                         failure.host_failures >= exclude_after;
  std::string offence = "failed " + std::to_string(failure.host_failures) + " times (elastic.exclude_after " +
                        std::to_string(exclude_after) + ")";

  // Membership changes first: a lost host cannot be used again, and a host that keeps failing
  // is left out when the job can go on without it. Neither uses the restart budget.
  if (failure.host_lost || repeat_offender) {
    Result<plan::RankPlan> next = plan_without(true);
    if (next) {
      decision.exclude_host = true;
      decision.action = next->world_size == failure.world_size ? RecoveryAction::replace : RecoveryAction::shrink;
      std::vector<int> moved = decision.action == RecoveryAction::replace && failure.host_lost &&
                                       spec.elastic.in_place && !history.in_place_failed && failure.plan
                                   ? ranks_moved_to_spare(*failure.plan, *next, failure.host)
                                   : std::vector<int>{};
      if (!moved.empty()) {
        decision.action = RecoveryAction::in_place;
        decision.replaced_ranks = std::move(moved);
        decision.why = failure.host + " is lost; a spare takes its " + std::to_string(decision.replaced_ranks.size()) +
                       " rank(s) in place (elastic.in_place): the workers on the other hosts keep running and their state";
        decision.next_plan = std::move(next).value();
        return decision;
      }
      std::string reason = failure.host_lost ? failure.host + " is lost" : failure.host + " " + offence;
      decision.why = decision.action == RecoveryAction::replace
                         ? reason + "; a spare takes its place at world size " + std::to_string(next->world_size)
                         : reason + "; the job shrinks to world size " + std::to_string(next->world_size) + " (was " +
                               std::to_string(failure.world_size) + ")";
      decision.next_plan = std::move(next).value();
      return decision;
    }
    if (failure.host_lost) {
      decision.exclude_host = true;
      decision.exit_code = ExitCode::hosts_lost;
      decision.why = next.error().message;
      return decision;
    }
    decision.exclusion_refused = true;
    offence += " but the job cannot go on without it: " + next.error().message + "; restarting in place";
  }

  // The same hosts again, within the restart budget.
  if (history.restarts_in_window >= spec.elastic.max_restarts) {
    decision.why = spec.elastic.max_restarts == 0
                       ? "no restarts allowed (elastic.max_restarts is 0; set it to recover from failures)"
                       : "restart budget spent: elastic.max_restarts=" + std::to_string(spec.elastic.max_restarts) +
                             " within elastic.restart_window " + format_duration(spec.elastic.restart_window);
    return decision;
  }
  Result<plan::RankPlan> same = plan_without(false);
  if (!same) {  // cannot happen for a plan that ran, but never assume
    decision.exit_code = ExitCode::hosts_lost;
    decision.why = same.error().message;
    return decision;
  }
  std::string budget = std::to_string(history.restarts_in_window + 1) + " of " + std::to_string(spec.elastic.max_restarts);
  if (spec.elastic.in_place && failure.single_rank && !history.in_place_failed) {
    decision.action = RecoveryAction::in_place;
    decision.replaced_ranks = {failure.rank};
    decision.why = (decision.exclusion_refused ? failure.host + " " + offence + "; " : std::string()) +
                   "in-place recovery " + budget + " (elastic.in_place): only the failed rank is replaced; the other " +
                   std::to_string(failure.world_size - 1) + " workers keep running and their state";
    decision.next_plan = std::move(same).value();
    return decision;
  }
  decision.action = RecoveryAction::restart;
  decision.why = decision.exclusion_refused
                     ? failure.host + " " + offence
                     : "restart " + budget + " on the same hosts" +
                           (history.in_place_failed ? " (every worker: the in-place recovery could not finish)" : "");
  decision.next_plan = std::move(same).value();
  return decision;
}

}  // namespace dtrain::supervisor
