// plan-<gen>.json read back for `dtrain status`: parsing plan::to_json's real output, refusing
// damaged files with a reason, and the one-line description of how the plan changed.

#include <doctest/doctest.h>

#include <filesystem>
#include <string>
#include <unistd.h>

#include "fuzz/plan_invariants.h"
#include "launcher/base/fd.h"
#include "launcher/plan/rank_plan.h"
#include "launcher/runlog/plan_record.h"
#include "launcher/spec/spec_loader.h"
#include "tests/unit/temp_dir.h"

using namespace dtrain;
using nlohmann::json;
using dtrain::testing::TempDir;

namespace {

// Four hosts of two slots with TP 2: four DP replicas, global batch 48.
spec::JobSpec four_hosts() {
  spec::LoadResult loaded = spec::parse_job_spec(
      "version: 1\nname: t\nhosts: [a, b, c, d]\nslots_per_host: 2\nworker: {command: [\"true\"]}\n"
      "parallelism: {tensor: 2}\nbatch: {global: 48, micro: 4}\nelastic: {min_hosts: 2}\n",
      "t.yaml", "/tmp");
  INFO(loaded.message());
  REQUIRE(loaded.ok());
  return *loaded.spec;
}

json plan_json(const std::vector<std::string>& without = {}) {
  Result<plan::RankPlan> plan = plan::make_plan(four_hosts(), without);
  REQUIRE(plan.ok());
  return plan::to_json(*plan);
}

PlanRecord record(const json& plan, int generation) {
  Result<PlanRecord> parsed = parse_plan_record(plan, generation, "plan.json");
  INFO((parsed ? "" : parsed.error().message));
  REQUIRE(parsed.ok());
  return *parsed;
}

}  // namespace

TEST_CASE("parse_plan_record reads plan::to_json: sizes, batch and each host's ranks with coordinates") {
  PlanRecord plan = record(plan_json({"b"}), 3);
  CHECK(plan.generation == 3);
  CHECK(plan.world_size == 6);
  CHECK(plan.data == 3);
  CHECK(plan.tensor == 2);
  CHECK(plan.pipeline == 1);
  CHECK(plan.global_batch == 48);
  CHECK(plan.micro_batch == 4);
  CHECK(plan.grad_accum == 4);
  REQUIRE(plan.hosts.size() == 3);
  CHECK(plan.hosts[1].name == "c");
  REQUIRE(plan.hosts[1].ranks.size() == 2);
  CHECK(plan.hosts[1].ranks[1].rank == 3);
  CHECK(plan.hosts[1].ranks[1].dp == 1);
  CHECK(plan.hosts[1].ranks[1].tp == 1);
  CHECK(plan.without == std::vector<std::string>{"b"});
  CHECK(plan.json["world_size"] == 6);
}

TEST_CASE("parse_plan_record refuses damaged plans with the field and the file") {
  json plan = plan_json();
  plan.erase("grad_accum");
  Result<PlanRecord> missing = parse_plan_record(plan, 0, "/run/plan-0.json");
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.error().message == "/run/plan-0.json: \"grad_accum\" is missing or not an integer");

  json dangling = plan_json();
  dangling["hosts"][0]["ranks"].push_back(99);
  Result<PlanRecord> unknown = parse_plan_record(dangling, 0, "p.json");
  REQUIRE_FALSE(unknown.ok());
  CHECK(unknown.error().message == "p.json: host a lists rank 99, which \"ranks\" does not describe");

  CHECK_FALSE(parse_plan_record(json::array(), 0, "p.json").ok());
  json wrong_type = plan_json();
  wrong_type["without"] = "b";
  CHECK_FALSE(parse_plan_record(wrong_type, 0, "p.json").ok());
}

TEST_CASE("plan_change_text says shrunk, by how much and why, and nothing for the same layout") {
  PlanRecord first = record(plan_json(), 0);
  CHECK(plan_change_text(first, record(plan_json(), 4), 0).empty());
  CHECK(plan_change_text(first, record(plan_json({"b"}), 2), 2) ==
        "shrunk from 8 to 6 ranks at gen 2: host b excluded; data 4 → 3; grad_accum 3 → 4");
  CHECK(plan_change_text(first, record(plan_json({"b", "c"}), 5), 5, 2) ==
        "shrunk from 8 to 4 ranks over 2 re-plans (current since gen 5): hosts b, c excluded; data 4 → 2; "
        "grad_accum 3 → 6");
}

TEST_CASE("plan_history_text compares with plan-0.json and counts re-plans across the files there") {
  TempDir dir;
  RunDirectory run = RunDirectory::at(dir.path, "t");
  auto write = [&](int generation, const json& plan) {
    REQUIRE(write_file_atomic(run.plan_path(generation), plan.dump(2)).ok());
  };
  write(0, plan_json());
  write(1, plan_json());
  write(2, plan_json({"b"}));
  // plan-3.json is missing (a generation that never started): skipped, not an error.
  write(4, plan_json({"b", "c"}));

  Result<PlanRecord> second = read_plan_record(run, 2);
  REQUIRE(second.ok());
  CHECK(plan_history_text(run, *second) ==
        "shrunk from 8 to 6 ranks at gen 2: host b excluded; data 4 → 3; grad_accum 3 → 4");
  Result<PlanRecord> fourth = read_plan_record(run, 4);
  REQUIRE(fourth.ok());
  CHECK(plan_history_text(run, *fourth) ==
        "shrunk from 8 to 4 ranks over 2 re-plans (current since gen 4): hosts b, c excluded; data 4 → 2; "
        "grad_accum 3 → 6");
  Result<PlanRecord> restart = read_plan_record(run, 1);
  REQUIRE(restart.ok());
  CHECK(plan_history_text(run, *restart).empty());

  Result<PlanRecord> absent = read_plan_record(run, 3);
  REQUIRE_FALSE(absent.ok());
  CHECK(absent.error().message == "no plan-3.json in " + dir.path);
}

TEST_CASE("a plan read without its JSON (the faster parser) is the same record, damaged files included") {
  TempDir dir;
  RunDirectory run = RunDirectory::at(dir.path, "t");
  int compared = 0, refused = 0;
  auto compare = [&](const json& plan) {
    REQUIRE(write_file_atomic(run.plan_path(0), plan.dump(2)).ok());
    Result<PlanRecord> kept = read_plan_record(run, 0, PlanJson::keep);
    Result<PlanRecord> dropped = read_plan_record(run, 0, PlanJson::drop);
    CAPTURE(plan.dump().substr(0, 300));
    CHECK(fuzz::describe_plan_record(dropped) == fuzz::describe_plan_record(kept));
    ++compared;
    if (!kept) ++refused;
  };
  compare(plan_json());
  compare(plan_json({"b", "c"}));
  CHECK(read_plan_record(run, 0, PlanJson::drop)->json.is_null());  // the plain plan took the fast path
  CHECK(fuzz::describe_plan_record(read_plan_record(run, 0, PlanJson::drop)).find("| a 0(0,0,0) 1(0,0,1) | d 2(1,0,0)") != std::string::npos);
  // Every field and array item of a real plan replaced by a wrong value, or removed.
  const std::vector<json> replacements = {json(nullptr), json("x"), json(1.5), json(2.0), json(-1), json(99),
                                          json(4294967296), json(true), json::array(), json::object()};
  json base = plan_json({"b"});
  base["spares_used"] = {"s1"};
  base["hosts"][0]["spare"] = false;
  for (const char* key : {"world_size", "data", "grad_accum", "without", "spares_used", "ranks", "hosts"}) {
    for (const json& replacement : replacements) {
      json plan = base;
      plan[key] = replacement;
      compare(plan);
    }
    json plan = base;
    plan.erase(key);
    compare(plan);
  }
  for (const char* key : {"rank", "dp", "tp", "name", "spare"}) {
    for (const json& replacement : replacements) {
      json plan = base;
      if (plan["ranks"][1].contains(key)) plan["ranks"][1][key] = replacement;
      if (std::string(key) == "name" || std::string(key) == "spare") plan["hosts"][1][key] = replacement;
      compare(plan);
    }
  }
  for (const json& replacement : replacements) {
    json plan = base;
    plan["hosts"][1]["ranks"][0] = replacement;
    compare(plan);
  }
  json duplicate = base;  // a rank described twice: the last description counts on both paths
  duplicate["ranks"].push_back({{"rank", 0}, {"dp", 7}, {"pp", 0}, {"tp", 1}});
  compare(duplicate);
  CHECK(compared > 100);
  CHECK(refused > 30);
}
