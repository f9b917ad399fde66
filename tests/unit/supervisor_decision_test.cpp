// decide_recovery, the recovery policy's one decision, case by case: what a person would expect
// the supervisor to do after each kind of failure, and the sentence that says why. Then the rules
// beside it (recovery_decision.h), each alone: which decisions spend the restart budget, the
// restart window, the spawn failure, a loss before the first generation, the plan after
// exclusions during a stop, the stop deadline, the crash loop and the end of an in-place attempt.

#include <doctest/doctest.h>

#include "launcher/supervisor/recovery_decision.h"
#include "tests/unit/plan_support.h"

using namespace dtrain;
using namespace dtrain::supervisor;
using dtrain::plan::testing::add_spares;
using dtrain::plan::testing::make_spec;

namespace {

spec::JobSpec four_hosts(int max_restarts, int min_hosts = 0) {
  spec::JobSpec spec = make_spec({"a", "b", "c", "d"}, 2, 1, 1, 0);
  spec.elastic.max_restarts = max_restarts;
  spec.elastic.min_hosts = min_hosts;
  return spec;
}

RootCause rank_failure(int rank, std::string host, FailureKind kind, std::string detail) {
  RootCause cause;
  cause.rank = rank;
  cause.host = std::move(host);
  cause.kind = kind;
  cause.detail = std::move(detail);
  return cause;
}

}  // namespace

TEST_CASE("a lost host with a spare idle: replace, world size kept, no restart used") {
  spec::JobSpec spec = four_hosts(0);
  add_spares(spec, {"spare"});
  RecoveryDecision decision = decide_recovery({"c", true, 0, 8}, {}, spec);
  CHECK(decision.action == RecoveryAction::replace);
  CHECK(decision.exclude_host);
  REQUIRE(decision.next_plan);
  CHECK(decision.next_plan->world_size == 8);
  CHECK(decision.why == "c is lost; a spare takes its place at world size 8");
}

TEST_CASE("a lost host without a spare: shrink when elastic.min_hosts allows, else give up with the planner's reason") {
  RecoveryDecision shrink = decide_recovery({"c", true, 0, 8}, {}, four_hosts(0, 3));
  CHECK(shrink.action == RecoveryAction::shrink);
  REQUIRE(shrink.next_plan);
  CHECK(shrink.next_plan->world_size == 6);
  CHECK(shrink.why == "c is lost; the job shrinks to world size 6 (was 8)");

  RecoveryDecision give_up = decide_recovery({"c", true, 0, 8}, {}, four_hosts(5));
  CHECK(give_up.action == RecoveryAction::give_up);
  CHECK(give_up.exit_code == ExitCode::hosts_lost);
  CHECK(give_up.exclude_host);
  CHECK(!give_up.why.empty());
  CHECK(!give_up.next_plan);
}

TEST_CASE("a second lost host counts the first: the plan leaves out every excluded host") {
  RecoveryDecision decision = decide_recovery({"d", true, 0, 6}, {{"c"}, 0}, four_hosts(0, 2));
  CHECK(decision.action == RecoveryAction::shrink);
  REQUIRE(decision.next_plan);
  CHECK(decision.next_plan->world_size == 4);
}

TEST_CASE("a crashed worker: restart in place while the budget lasts, then give up saying which budget") {
  RecoveryDecision first = decide_recovery({"b", false, 1, 8}, {{}, 0}, four_hosts(2));
  CHECK(first.action == RecoveryAction::restart);
  CHECK(!first.exclude_host);
  CHECK(first.why == "restart 1 of 2 on the same hosts");
  REQUIRE(first.next_plan);
  CHECK(first.next_plan->world_size == 8);

  RecoveryDecision spent = decide_recovery({"b", false, 1, 8}, {{}, 2}, four_hosts(2));
  CHECK(spent.action == RecoveryAction::give_up);
  CHECK(spent.exit_code == ExitCode::job_failed);
  CHECK(spent.why.find("restart budget spent: elastic.max_restarts=2 within elastic.restart_window") == 0);

  RecoveryDecision none = decide_recovery({"b", false, 1, 8}, {}, four_hosts(0));
  CHECK(none.action == RecoveryAction::give_up);
  CHECK(none.why == "no restarts allowed (elastic.max_restarts is 0; set it to recover from failures)");
}

TEST_CASE("a host that keeps failing is excluded when the job can go on without it, without using the budget") {
  spec::JobSpec spec = four_hosts(0);
  spec.elastic.exclude_after = 2;
  add_spares(spec, {"spare"});
  RecoveryDecision decision = decide_recovery({"b", false, 2, 8}, {}, spec);
  CHECK(decision.action == RecoveryAction::replace);
  CHECK(decision.exclude_host);
  CHECK(decision.why == "b failed 2 times (elastic.exclude_after 2); a spare takes its place at world size 8");
}

TEST_CASE("a host that keeps failing but cannot be spared is restarted in place, and the decision says why") {
  spec::JobSpec spec = four_hosts(3);
  spec.elastic.exclude_after = 2;
  RecoveryDecision decision = decide_recovery({"b", false, 2, 8}, {{}, 1}, spec);
  CHECK(decision.action == RecoveryAction::restart);
  CHECK(!decision.exclude_host);
  CHECK(decision.exclusion_refused);
  CHECK(decision.why.find("b failed 2 times (elastic.exclude_after 2) but the job cannot go on without it: ") == 0);
  CHECK(decision.why.find("; restarting in place") != std::string::npos);
  // …and still within the budget: with it spent, the run ends.
  RecoveryDecision spent = decide_recovery({"b", false, 2, 8}, {{}, 3}, spec);
  CHECK(spent.action == RecoveryAction::give_up);
}

TEST_CASE("a failure tied to no host (a launch step of the run) restarts like a crash") {
  RecoveryDecision decision = decide_recovery({"", false, 0, 8}, {}, four_hosts(1));
  CHECK(decision.action == RecoveryAction::restart);
  CHECK(!decision.exclude_host);
}

// ---- the rules beside decide_recovery ----------------------------------------------------------

TEST_CASE("restarts and in-place repairs of a rank spend the budget, membership changes do not") {
  spec::JobSpec spec = four_hosts(3, 2);
  CHECK(decide_recovery({"b", false, 1, 8}, {}, spec).uses_restart);  // restart
  RecoveryDecision shrink = decide_recovery({"c", true, 0, 8}, {}, spec);
  CHECK(shrink.action == RecoveryAction::shrink);
  CHECK(!shrink.uses_restart);
  spec::JobSpec spared = four_hosts(3);
  add_spares(spared, {"spare"});
  RecoveryDecision replace = decide_recovery({"c", true, 0, 8}, {}, spared);
  CHECK(replace.action == RecoveryAction::replace);
  CHECK(!replace.uses_restart);
  CHECK(!decide_recovery({"b", false, 1, 8}, {{}, 3}, spec).uses_restart);  // give up

  spared.elastic.in_place = true;
  Result<plan::RankPlan> plan = plan::make_plan(spared);
  REQUIRE(plan.ok());
  FailureFacts crash{"b", false, 1, 8, true, &*plan, 3};
  RecoveryDecision repair = decide_recovery(crash, {}, spared);
  CHECK(repair.action == RecoveryAction::in_place);
  CHECK(repair.uses_restart);
  FailureFacts lost{"c", true, 0, 8, false, &*plan, -1};
  RecoveryDecision moved = decide_recovery(lost, {}, spared);
  CHECK(moved.action == RecoveryAction::in_place);  // the spare takes c's ranks in place
  CHECK(!moved.uses_restart);
}

TEST_CASE("restarts older than elastic.restart_window no longer count, and a window of 0 keeps them all") {
  spec::JobSpec spec = four_hosts(3);
  spec.elastic.restart_window = Millis(60'000);
  std::vector<int64_t> times{1'000, 50'000, 100'000};
  CHECK(restarts_in_window(times, 100'000, spec) == 2);
  CHECK(times == std::vector<int64_t>{50'000, 100'000});
  CHECK(restarts_in_window(times, 160'001, spec) == 0);
  spec.elastic.restart_window = Millis(0);
  std::vector<int64_t> kept{1'000, 2'000};
  CHECK(restarts_in_window(kept, 10'000'000, spec) == 2);
}

TEST_CASE("a worker that cannot be spawned ends the run at once, naming the rank and its host") {
  RecoveryDecision decision = decide_spawn_failure(rank_failure(5, "b", FailureKind::worker_spawn, "No such file"));
  CHECK(decision.action == RecoveryAction::give_up);
  CHECK(decision.exit_code == ExitCode::job_failed);
  CHECK(!decision.uses_restart);
  CHECK(decision.why == "rank 5 cannot be spawned on b; it would not start next time either");
}

TEST_CASE("a host lost before the first generation: start without it only when elastic.min_hosts allows") {
  RecoveryDecision refused = decide_loss_while_connecting({"c"}, {}, 8, four_hosts(0));
  CHECK(refused.action == RecoveryAction::give_up);
  CHECK(refused.exit_code == ExitCode::infra);
  CHECK(refused.exclude_host);
  CHECK(refused.why == "cannot start without c (set elastic.min_hosts to start with fewer hosts)");

  RecoveryDecision shrink = decide_loss_while_connecting({"c"}, {"a"}, 8, four_hosts(0, 2));
  CHECK(shrink.action == RecoveryAction::shrink);
  REQUIRE(shrink.next_plan);
  CHECK(shrink.next_plan->world_size == 4);  // neither a nor c
  for (const plan::RankSlot& slot : shrink.next_plan->ranks) CHECK((slot.host != "a" && slot.host != "c"));

  RecoveryDecision too_few = decide_loss_while_connecting({"c"}, {"a", "b"}, 8, four_hosts(0, 3));
  CHECK(too_few.action == RecoveryAction::give_up);
  CHECK(too_few.exit_code == ExitCode::infra);
  CHECK(!too_few.next_plan);

  spec::JobSpec spared = four_hosts(0, 1);
  add_spares(spared, {"spare"});
  RecoveryDecision replace = decide_loss_while_connecting({"c"}, {}, 8, spared);
  CHECK(replace.action == RecoveryAction::replace);
  REQUIRE(replace.next_plan);
  CHECK(replace.next_plan->world_size == 8);
}

TEST_CASE("hosts lost together before the first generation: one decision names them, short at any count") {
  RecoveryDecision two = decide_loss_while_connecting({"c", "d"}, {}, 8, four_hosts(0, 2));
  REQUIRE(two.next_plan);
  CHECK(two.next_plan->world_size == 4);
  CHECK(two.why == "c and d are lost before the first generation; starting without them at world size 4 (elastic.min_hosts 2)");
  RecoveryDecision refused = decide_loss_while_connecting({"a", "b", "c", "d", "e"}, {}, 8, four_hosts(0));
  CHECK(refused.why == "cannot start without a, b, c and 2 more (set elastic.min_hosts to start with fewer hosts)");
}

TEST_CASE("may_start_without counts hosts and spares left against elastic.min_hosts") {
  CHECK(!may_start_without({"a"}, four_hosts(0)));  // no min_hosts: every host is needed
  CHECK(may_start_without({}, four_hosts(0)));
  CHECK(may_start_without({"a", "b"}, four_hosts(0, 2)));
  CHECK(!may_start_without({"a", "b", "c"}, four_hosts(0, 2)));
  spec::JobSpec spared = four_hosts(0, 4);
  add_spares(spared, {"spare"});
  CHECK(may_start_without({"a"}, spared));
}

TEST_CASE("the plan after exclusions during a stop leaves out every excluded host, or says why there is none") {
  Result<plan::RankPlan> plan = replan_without({"b", "d"}, four_hosts(0, 2));
  REQUIRE(plan.ok());
  CHECK(plan->world_size == 4);
  Result<plan::RankPlan> none = replan_without({"b", "c", "d"}, four_hosts(0, 2));
  CHECK(!none.ok());
}

TEST_CASE("the stop deadline is stop_grace + heartbeat.timeout, and only a recovering run excludes the silent hosts") {
  spec::JobSpec spec = four_hosts(1);
  spec.stop_grace = Millis(2'000);
  spec.heartbeat.timeout = Millis(5'000);
  CHECK(stop_deadline_ms(10'000, spec) == 17'000);
  CHECK(exclude_unconfirmed_hosts(true));
  CHECK(!exclude_unconfirmed_hosts(false));
}

TEST_CASE("progress: a step past the start, a newer checkpoint, or without either a long enough run") {
  spec::JobSpec spec = four_hosts(1);
  spec.heartbeat.hang_timeout = Millis(20'000);  // progress_window: 40 s
  CHECK(progress_window(spec) == Millis(40'000));
  CHECK(made_progress({100, 101, 100, 100, 0}, spec));       // a step advanced
  CHECK(!made_progress({100, 100, 100, 100, 999'999}, spec));  // steps known, none advanced: time is no excuse
  CHECK(made_progress({100, 100, 100, 120, 0}, spec));       // a newer checkpoint
  CHECK(made_progress({-1, -1, -1, -1, 40'000}, spec));      // nothing known: it ran progress_window
  CHECK(!made_progress({-1, -1, -1, -1, 39'999}, spec));
  spec.elastic.progress_window = Millis(5'000);
  CHECK(made_progress({-1, -1, -1, -1, 5'000}, spec));
}

TEST_CASE("progress_window auto follows the hang timeout in force when the generation ended") {
  spec::JobSpec spec = four_hosts(1);  // hang_timeout and progress_window: auto
  CHECK(progress_window(spec) == Millis(120'000));  // 2 x the warm-up value, 1 minute
  CHECK(progress_window(spec, Millis(1'500)) == Millis(3'000));
  CHECK(made_progress({-1, -1, -1, -1, 3'000, 1'500}, spec));
  CHECK(!made_progress({-1, -1, -1, -1, 2'999, 1'500}, spec));
  spec.elastic.progress_window = Millis(5'000);  // explicit: as set
  CHECK(progress_window(spec, Millis(1'500)) == Millis(5'000));
}

TEST_CASE("the crash loop: crash_loop_after generations in a row without progress end the run, progress resets the count") {
  spec::JobSpec spec = four_hosts(10);
  spec.elastic.crash_loop_after = 3;
  spec.heartbeat.hang_timeout = Millis(20'000);
  GenerationProgress stuck{100, 100, 100, 100, 1'000};
  CrashLoopVerdict first = judge_crash_loop(stuck, 0, spec);
  CHECK(first.generations_without_progress == 1);
  CHECK(!first.give_up);
  CHECK(!judge_crash_loop(stuck, 1, spec).give_up);
  CrashLoopVerdict third = judge_crash_loop(stuck, 2, spec);
  CHECK(third.generations_without_progress == 3);
  REQUIRE(third.give_up);
  CHECK(*third.give_up == "no progress across 3 consecutive generations (no step advanced, no checkpoint "
                          "committed; elastic.crash_loop_after 3)");
  CHECK(judge_crash_loop({100, 101, 100, 100, 1'000}, 2, spec).generations_without_progress == 0);
  CrashLoopVerdict silent = judge_crash_loop({-1, -1, -1, -1, 1'000}, 2, spec);
  REQUIRE(silent.give_up);
  CHECK(silent.give_up->find(", none ran 40s or longer;") != std::string::npos);
}

TEST_CASE("a rank failing during an in-place attempt falls back to a full restart, a lost host is decided anew") {
  InPlaceEnd rank = end_in_place_on_failure(rank_failure(3, "h1", FailureKind::worker_exit, "exit code 1"), false);
  CHECK(rank.fall_back);
  CHECK(rank.why == "rank 3 on h1: worker.exit (exit code 1)");
  RootCause lost;
  lost.kind = FailureKind::host_lost;
  lost.host = "h2";
  lost.detail = "channel closed";
  InPlaceEnd host = end_in_place_on_failure(lost, true);
  CHECK(!host.fall_back);
  CHECK(host.why == "host.lost h2 (channel closed)");
}

TEST_CASE("an in-place attempt past its deadline says what it was waiting for") {
  spec::JobSpec spec = four_hosts(1);
  spec.elastic.in_place_timeout = Millis(30'000);
  std::vector<RankStatus> ranks(4);
  ranks[0].comm_ready = ranks[2].comm_ready = true;
  CHECK(in_place_timeout_reason(true, ranks, spec) ==
        "not finished within 30s (elastic.in_place_timeout); the killed rank's exit was never seen");
  CHECK(in_place_timeout_reason(false, ranks, spec) ==
        "not finished within 30s (elastic.in_place_timeout); no communicator from rank(s) 1,3");
  for (RankStatus& r : ranks) r.comm_ready = true;
  CHECK(in_place_timeout_reason(false, ranks, spec) == "not finished within 30s (elastic.in_place_timeout)");
}

TEST_CASE("a host's carry-over that misses a survivor of that host ends the attempt, naming the ranks") {
  Result<plan::RankPlan> plan = plan::make_plan(four_hosts(1));  // 2 ranks per host: b has 2 and 3
  REQUIRE(plan.ok());
  CHECK(!carry_over_shortfall(*plan, {3}, "b", {2}, 1));       // 3 is replaced, 2 carried
  CHECK(!carry_over_shortfall(*plan, {3}, "a", {0, 1}, 1));
  CHECK(carry_over_shortfall(*plan, {3}, "a", {1}, 1) ==
        "rank(s) 0 on a had ended before they could be carried over to generation 1");
}
