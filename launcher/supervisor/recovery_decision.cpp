#include "launcher/supervisor/recovery_decision.h"

#include <algorithm>
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
    decision.uses_restart = true;
    decision.replaced_ranks = {failure.rank};
    decision.why = (decision.exclusion_refused ? failure.host + " " + offence + "; " : std::string()) +
                   "in-place recovery " + budget + " (elastic.in_place): only the failed rank is replaced; the other " +
                   std::to_string(failure.world_size - 1) + " workers keep running and their state";
    decision.next_plan = std::move(same).value();
    return decision;
  }
  decision.action = RecoveryAction::restart;
  decision.uses_restart = true;
  decision.why = decision.exclusion_refused
                     ? failure.host + " " + offence
                     : "restart " + budget + " on the same hosts" +
                           (history.in_place_failed ? " (every worker: the in-place recovery could not finish)" : "");
  decision.next_plan = std::move(same).value();
  return decision;
}

int restarts_in_window(std::vector<int64_t>& restart_times_ms, int64_t now_ms, const spec::JobSpec& spec) {
  const int64_t window = spec.elastic.restart_window.count();
  std::erase_if(restart_times_ms, [&](int64_t t) { return window > 0 && now_ms - t > window; });
  return static_cast<int>(restart_times_ms.size());
}

RecoveryDecision decide_spawn_failure(const RootCause& cause) {
  RecoveryDecision decision;
  decision.why = "rank " + std::to_string(cause.rank) + " cannot be spawned" +
                 (cause.host.empty() ? "" : " on " + cause.host) + "; it would not start next time either";
  return decision;
}

namespace {

/// "a", "a and b", "a, b and 3 more": the hosts of one decision, short at any count.
std::string name_hosts(const std::vector<std::string>& hosts) {
  constexpr size_t kNamed = 3;
  std::string text;
  size_t named = hosts.size() <= kNamed + 1 ? hosts.size() : kNamed;
  for (size_t i = 0; i < named; ++i) {
    if (i > 0) text += i + 1 == named && named == hosts.size() ? " and " : ", ";
    text += hosts[i];
  }
  if (named < hosts.size()) text += " and " + std::to_string(hosts.size() - named) + " more";
  return text;
}

}  // namespace

RecoveryDecision decide_loss_while_connecting(const std::vector<std::string>& lost, const std::set<std::string>& excluded,
                                              int world_size, const spec::JobSpec& spec) {
  RecoveryDecision decision;
  decision.exclude_host = true;
  std::set<std::string> without = excluded;
  without.insert(lost.begin(), lost.end());
  const std::string who = name_hosts(lost);
  Result<plan::RankPlan> next =
      spec.elastic.min_hosts > 0
          ? replan_without(without, spec)
          : Result<plan::RankPlan>(
                Error::user("cannot start without " + who + " (set elastic.min_hosts to start with fewer hosts)"));
  if (!next) {
    decision.exit_code = ExitCode::infra;
    decision.why = next.error().message;
    return decision;
  }
  decision.action = next->world_size == world_size ? RecoveryAction::replace : RecoveryAction::shrink;
  decision.why = who + (lost.size() == 1 ? " is" : " are") + " lost before the first generation; starting without " +
                 (lost.size() == 1 ? "it" : "them") + " at world size " + std::to_string(next->world_size) +
                 " (elastic.min_hosts " + std::to_string(spec.elastic.min_hosts) + ")";
  decision.next_plan = std::move(next).value();
  return decision;
}

bool may_start_without(const std::set<std::string>& excluded, const spec::JobSpec& spec) {
  if (spec.elastic.min_hosts <= 0) return excluded.empty();
  int left = 0;
  for (const auto* list : {&spec.hosts, &spec.spares}) {
    for (const spec::HostEntry& host : *list) left += excluded.count(host.name) == 0 ? 1 : 0;
  }
  return left >= spec.elastic.min_hosts;
}

Result<plan::RankPlan> replan_without(const std::set<std::string>& excluded, const spec::JobSpec& spec) {
  return plan::make_plan(spec, std::vector<std::string>(excluded.begin(), excluded.end()));
}

int64_t stop_deadline_ms(int64_t stop_sent_ms, const spec::JobSpec& spec) {
  return stop_sent_ms + spec.stop_grace.count() + spec.heartbeat.timeout.count();
}

bool exclude_unconfirmed_hosts(bool recovering) { return recovering; }

Millis progress_window(const spec::JobSpec& spec, Millis hang_timeout_in_force) {
  if (spec.elastic.progress_window.count() > 0) return spec.elastic.progress_window;
  return 2 * (hang_timeout_in_force.count() > 0 ? hang_timeout_in_force : spec.heartbeat.initial_hang_timeout());
}

bool made_progress(const GenerationProgress& generation, const spec::JobSpec& spec) {
  // Steps: any rank of the generation reported one (a worker of the protocol, or instrumented).
  bool steps_known = generation.newest_step >= 0;
  if (steps_known && generation.newest_step > generation.start_step) return true;
  if (generation.latest_checkpoint > generation.start_checkpoint) return true;
  if (steps_known) return false;
  // Neither can be known (a script that does not speak the worker protocol and wrote no
  // checkpoint through it): a generation that ran long enough is taken to have trained.
  return generation.ran_ms >= progress_window(spec, Millis(generation.hang_timeout_ms)).count();
}

CrashLoopVerdict judge_crash_loop(const GenerationProgress& generation, int without_progress_before,
                                  const spec::JobSpec& spec) {
  CrashLoopVerdict verdict;
  verdict.generations_without_progress = made_progress(generation, spec) ? 0 : without_progress_before + 1;
  const int crash_loop_after = spec.elastic.crash_loop_after;
  if (verdict.generations_without_progress < crash_loop_after) return verdict;
  verdict.give_up = "no progress across " + std::to_string(verdict.generations_without_progress) +
                    " consecutive generations (no step advanced, no checkpoint committed" +
                    (generation.newest_step >= 0 ? "" : ", none ran " + format_duration(progress_window(spec, Millis(generation.hang_timeout_ms))) + " or longer") +
                    "; elastic.crash_loop_after " + std::to_string(crash_loop_after) + ")";
  return verdict;
}

InPlaceEnd end_in_place_on_failure(const RootCause& cause, bool host_lost) {
  InPlaceEnd end;
  end.fall_back = !host_lost;
  end.why = cause.rank >= 0 ? "rank " + std::to_string(cause.rank) + (cause.host.empty() ? "" : " on " + cause.host) +
                                  ": " + events::to_string(cause.kind) + " (" + cause.detail + ")"
                            : events::to_string(cause.kind) + " " + cause.host + " (" + cause.detail + ")";
  return end;
}

std::string in_place_timeout_reason(bool awaiting_exit, const std::vector<RankStatus>& ranks,
                                    const spec::JobSpec& spec) {
  std::string missing;
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (!ranks[i].comm_ready) missing += (missing.empty() ? "" : ",") + std::to_string(i);
  }
  return "not finished within " + format_duration(spec.in_place_timeout()) + " (elastic.in_place_timeout)" +
         (awaiting_exit     ? "; the killed rank's exit was never seen"
          : missing.empty() ? ""
                            : "; no communicator from rank(s) " + missing);
}

std::optional<std::string> carry_over_shortfall(const plan::RankPlan& plan, const std::vector<int>& replaced,
                                                const std::string& host, const std::vector<int>& carried, int gen) {
  std::string missing;
  for (size_t i = 0; i < plan.ranks.size(); ++i) {
    const int rank = static_cast<int>(i);
    bool anew = std::find(replaced.begin(), replaced.end(), rank) != replaced.end();
    if (plan.ranks[i].host != host || anew) continue;
    if (std::find(carried.begin(), carried.end(), rank) == carried.end()) {
      missing += (missing.empty() ? "" : ",") + std::to_string(rank);
    }
  }
  if (missing.empty()) return std::nullopt;
  return "rank(s) " + missing + " on " + host + " had ended before they could be carried over to generation " +
         std::to_string(gen);
}

}  // namespace dtrain::supervisor
