// decide_recovery, the recovery policy's one decision, case by case: what a person would expect
// the supervisor to do after each kind of failure, and the sentence that says why.

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
