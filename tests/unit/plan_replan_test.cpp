// Re-planning without hosts: spares replace lost hosts, shrinks drop whole DP replicas and keep
// the global batch, min_hosts refuses, unknown names are errors, diffs read in one line.

#include <doctest/doctest.h>

#include "launcher/plan/rank_plan.h"
#include "launcher/runlog/plan_record.h"
#include "tests/unit/plan_support.h"

using namespace dtrain;
using namespace dtrain::plan;
using dtrain::plan::testing::add_spares;
using dtrain::plan::testing::make_spec;

namespace {

RankPlan plan_of(const spec::JobSpec& spec, const std::vector<std::string>& without = {}) {
  Result<RankPlan> plan = make_plan(spec, without);
  if (!plan) FAIL("make_plan failed: " << plan.error().message);
  return *plan;
}

std::vector<std::string> names(const RankPlan& plan) {
  std::vector<std::string> out;
  for (const PlanHost& host : plan.hosts) out.push_back(host.entry.name);
  return out;
}

// Three 2-slot hosts, tensor 2: data 3; global 96 with micro 16 → grad_accum 2.
spec::JobSpec three_hosts() {
  spec::JobSpec spec = make_spec({"gpu01", "gpu02", "gpu03"}, 2, 2, 1, 0);
  spec.batch = {96, 16};
  return spec;
}

}  // namespace

TEST_CASE("a lost host is replaced in place by the next spare") {
  spec::JobSpec spec = three_hosts();
  add_spares(spec, {"gpu09", "gpu10"});
  RankPlan before = plan_of(spec);
  CHECK(names(before) == std::vector<std::string>{"gpu01", "gpu02", "gpu03"});

  RankPlan after = plan_of(spec, {"gpu02"});
  CHECK(names(after) == std::vector<std::string>{"gpu01", "gpu09", "gpu03"});
  CHECK(after.world_size == 6);
  CHECK(after.data == 3);
  CHECK(after.grad_accum == 2);
  CHECK(after.ranks[2].host == "gpu09");
  CHECK(after.ranks[2].local_rank == 0);
  CHECK(after.without == std::vector<std::string>{"gpu02"});
  CHECK(after.spares_used == std::vector<std::string>{"gpu09"});
  CHECK(after.notes == std::vector<std::string>{"replaced gpu02 with spare gpu09"});
  CHECK(diff_text(before, after) ==
        "host gpu02 excluded; spare gpu09 in use; gpu09 takes gpu02's place: ranks 2–3 at (tp,pp,dp) (0,0,1) (1,0,1)");
}

TEST_CASE("a spare that is itself in --without is skipped") {
  spec::JobSpec spec = three_hosts();
  add_spares(spec, {"gpu09", "gpu10"});
  RankPlan after = plan_of(spec, {"gpu01", "gpu09"});
  CHECK(names(after) == std::vector<std::string>{"gpu10", "gpu02", "gpu03"});
  CHECK(after.spares_used == std::vector<std::string>{"gpu10"});
  CHECK(after.ranks[0].host == "gpu10");  // rank 0 moves with the replacement
}

TEST_CASE("shrink: one replica dropped, grad accumulation keeps the global batch") {
  spec::JobSpec spec = three_hosts();
  spec.batch = {96, 16};  // 6 micro-batches per step: data 3 × 2 → data 2 × 3
  spec.elastic.min_hosts = 2;
  RankPlan before = plan_of(spec);
  CHECK(before.grad_accum == 2);
  RankPlan after = plan_of(spec, {"gpu02"});
  CHECK(after.data == 2);
  CHECK(after.world_size == 4);
  CHECK(after.micro_batch == 16);
  CHECK(after.grad_accum == 3);
  CHECK(after.global_batch == 96);
  CHECK(names(after) == std::vector<std::string>{"gpu01", "gpu03"});
  CHECK(after.ranks[2].host == "gpu03");
  CHECK(after.ranks[2].dp == 1);
  CHECK(after.notes == std::vector<std::string>{
                           "left out gpu02: no spare left",
                           "dropped 1 data-parallel replica (data 3 → 2); grad_accum 2 → 3 keeps "
                           "global batch 96"});
  CHECK(diff_text(before, after) == "shrunk from 6 to 4 ranks; host gpu02 excluded; data 3 → 2; grad_accum 2 → 3");
}

TEST_CASE("shrink picks the largest data that keeps the global batch exact") {
  // 5 one-slot hosts, global 80 = micro 4 × data 5 × 4 (20 micro-batches). Losing one leaves
  // room for data 4, which divides 20; losing two leaves 3, which does not: data 2, grad_accum 10.
  spec::JobSpec spec = make_spec({"a", "b", "c", "d", "e"}, 1, 1, 1, 0);
  spec.batch = {80, 4};
  spec.elastic.min_hosts = 1;
  CHECK(plan_of(spec, {"e"}).data == 4);
  CHECK(plan_of(spec, {"e"}).grad_accum == 5);
  RankPlan after = plan_of(spec, {"d", "e"});
  CHECK(after.data == 2);
  CHECK(after.grad_accum == 10);
  CHECK(after.hosts.size() == 2);
  CHECK(after.notes == std::vector<std::string>{
                           "left out d: no spare left", "left out e: no spare left",
                           "dropped 3 data-parallel replicas (data 5 → 2); grad_accum 4 → 10 "
                           "keeps global batch 80 (data 3 would fit, but data must divide global "
                           "/ micro = 20)",
                           "c runs no ranks: world 2 fills the hosts before it"});
}

TEST_CASE("shrink with a fixed data and no batch set") {
  spec::JobSpec spec = make_spec({"a", "b", "c"}, 4, 4, 1, 3);
  spec.elastic.min_hosts = 1;
  RankPlan after = plan_of(spec, {"a"});
  CHECK(after.data == 2);
  CHECK(after.global_batch == 0);
  CHECK(after.grad_accum == 1);
  CHECK(after.ranks[0].host == "b");
}

TEST_CASE("min_hosts 0 refuses any shrink, saying how to allow it") {
  Result<RankPlan> plan = make_plan(three_hosts(), {"gpu02"});
  REQUIRE_FALSE(plan.ok());
  CHECK(plan.error().kind == ErrorKind::user);
  CHECK(plan.error().message ==
        "losing gpu02 leaves 2 of 3 hosts (data 3 → 2); set elastic.min_hosts to allow shrinking, "
        "or add a spare");
}

TEST_CASE("min_hosts refuses a shrink below it") {
  spec::JobSpec spec = three_hosts();
  spec.elastic.min_hosts = 2;
  Result<RankPlan> plan = make_plan(spec, {"gpu02", "gpu03"});
  REQUIRE_FALSE(plan.ok());
  CHECK(plan.error().message.find("losing gpu02, gpu03 leaves 1 host to run ranks, fewer than "
                                  "elastic.min_hosts=2") == 0);
}

TEST_CASE("losing a host that ran no ranks changes nothing and needs no min_hosts") {
  spec::JobSpec spec = make_spec({"a", "b", "c"}, 4, 1, 1, 8);  // c runs nothing
  RankPlan before = plan_of(spec);
  RankPlan after = plan_of(spec, {"c"});
  CHECK(after.world_size == 8);
  CHECK(diff_text(before, after) == "no change");
  CHECK(after.notes == std::vector<std::string>{"left out c: no spare left"});
}

TEST_CASE("losing every host is refused: no replica fits") {
  spec::JobSpec spec = three_hosts();
  spec.elastic.min_hosts = 1;
  Result<RankPlan> plan = make_plan(spec, {"gpu01", "gpu02", "gpu03"});
  REQUIRE_FALSE(plan.ok());
  CHECK(plan.error().message.find("no plan is possible") != std::string::npos);
}

TEST_CASE("an unknown --without host is a user error that names it and lists the hosts") {
  spec::JobSpec spec = three_hosts();
  add_spares(spec, {"gpu09"});
  Result<RankPlan> plan = make_plan(spec, {"gpu2"});
  REQUIRE_FALSE(plan.ok());
  CHECK(plan.error().kind == ErrorKind::user);
  CHECK(plan.error().message ==
        "without: 'gpu2' is not a host of this job (did you mean 'gpu02'?); hosts: gpu01, gpu02, "
        "gpu03; spares: gpu09");
}

TEST_CASE("repeated names in without count once") {
  spec::JobSpec spec = three_hosts();
  add_spares(spec, {"gpu09", "gpu10"});
  RankPlan after = plan_of(spec, {"gpu02", "gpu02"});
  CHECK(after.without == std::vector<std::string>{"gpu02"});
  CHECK(after.spares_used == std::vector<std::string>{"gpu09"});
}

TEST_CASE("the re-plan shows up in JSON and text") {
  spec::JobSpec spec = three_hosts();
  add_spares(spec, {"gpu09"});
  RankPlan after = plan_of(spec, {"gpu02"});
  nlohmann::json json = to_json(after);
  CHECK(json["without"] == nlohmann::json({"gpu02"}));
  CHECK(json["spares_used"] == nlohmann::json({"gpu09"}));
  CHECK(json["hosts"][1]["spare"] == true);
  CHECK(json["notes"][0] == "replaced gpu02 with spare gpu09");
  std::string text = to_text(after);
  CAPTURE(text);
  CHECK(text.find("gpu09 2/2 slots, spare") != std::string::npos);
  CHECK(text.find("without: gpu02; spares used: gpu09\n") != std::string::npos);
  CHECK(text.find("notes:\n  - replaced gpu02 with spare gpu09\n") != std::string::npos);
}

TEST_CASE("the plan.changed diff and status's plan change say it in the same words") {
  spec::JobSpec spec = three_hosts();
  spec.elastic.min_hosts = 2;
  add_spares(spec, {"gpu09"});
  RankPlan before = plan_of(spec);
  auto record = [](const RankPlan& plan, int generation) {
    Result<PlanRecord> parsed = parse_plan_record(to_json(plan), generation, "plan.json");
    if (!parsed) FAIL("parse_plan_record failed: " << parsed.error().message);
    return *parsed;
  };
  PlanRecord first = record(before, 0);

  RankPlan replaced = plan_of(spec, {"gpu02"});
  CHECK(plan_change_text(first, record(replaced, 1), 1) ==
        "re-planned at gen 1, still 6 ranks: " + diff_text(before, replaced));

  RankPlan shrunk = plan_of(spec, {"gpu02", "gpu09"});
  std::string diff = diff_text(before, shrunk);
  REQUIRE(diff.rfind("shrunk from 6 to 4 ranks; ", 0) == 0);
  CHECK(plan_change_text(first, record(shrunk, 2), 2) ==
        "shrunk from 6 to 4 ranks at gen 2: " + diff.substr(std::string("shrunk from 6 to 4 ranks; ").size()));
}
