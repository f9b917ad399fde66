// The registry's read commands as a user runs them: the real dtrain binary over a registry this
// test fills through the RegistryDb API with known rows, so every number below is computed by
// hand. history, audit, hosts --reliability, usage with cost and usage --capacity; their --json
// parsed; bad flags exit 2 with a clear message; a missing or damaged registry names the file
// and `dtrain registry rebuild`; a bad config.yaml names its file:line:col.

#include <doctest/doctest.h>

#include <filesystem>

#include <nlohmann/json.hpp>

#include "launcher/base/clock.h"
#include "launcher/registry/registry_db.h"
#include "tests/integration/dtrain_runner.h"

using namespace dtrain;
using namespace dtrain::testing;
using nlohmann::json;

namespace {

int64_t at(const std::string& utc) { return *parse_timestamp_utc(utc + ".000Z"); }

registry::AllocationRow held(const std::string& run_id, int generation, const std::string& host, int units,
                             const std::string& from, const std::string& to, const std::string& resource = "gpu") {
  return {run_id, generation, host, units, resource, at(from), at(to), "run ended"};
}

/// All in the past, so no number depends on when the test runs:
///  cross (vision, alice): gpu01, 8 GPUs, 2025-11-30 22:00 → 12-01 04:00: 48 GPU-h.
///  shrink (vision, bob): gpu02 + gpu03 (4 GPUs each) from 2025-12-02 00:00; gpu03 lost at 02:00
///    (8 GPU-h), gpu02 generation 0 to 02:30 (10), generation 1 on gpu02 alone to 06:30 (16):
///    34 GPU-h. gpu03 was the root cause; rank 0 on gpu02 a cascade; gpu03 excluded at 02:10.
///  cpu (nlp, carol): cpu01, 4 slots, 2025-12-01 00:00 → 10:00: 40 slot-h.
/// Audit: alice submitted cross; root (sudo from alice) stopped shrink; bob resumed it.
void fill_registry(const std::string& home) {
  std::filesystem::create_directories(home);
  Result<registry::RegistryDb> opened = registry::RegistryDb::open(home + "/registry.db", true);
  REQUIRE(opened.ok());
  registry::RegistryDb& db = *opened;
  REQUIRE(db.begin());
  registry::RunRow cross{"cross", "vision", "alice", "cross-job", "", "", at("2025-11-30T21:59:00"),
                         at("2025-11-30T22:00:00"), at("2025-12-01T04:00:00"), "succeeded", 0, ""};
  registry::RunRow shrink{"shrink", "vision", "bob", "shrink-job", "", "", at("2025-12-01T23:59:00"),
                          at("2025-12-02T00:00:00"), at("2025-12-02T06:30:00"), "failed", 1, "rank 0 diverged"};
  registry::RunRow cpu{"cpu", "nlp", "carol", "cpu-job", "", "", at("2025-11-30T23:50:00"),
                       at("2025-12-01T00:00:00"), at("2025-12-01T10:00:00"), "succeeded", 0, ""};
  for (const registry::RunRow& run : {cross, shrink, cpu}) REQUIRE(db.insert_run(run));
  REQUIRE(db.insert_allocation(held("cross", 0, "gpu01", 8, "2025-11-30T22:00:00", "2025-12-01T04:00:00")));
  REQUIRE(db.insert_allocation(held("shrink", 0, "gpu02", 4, "2025-12-02T00:00:00", "2025-12-02T02:30:00")));
  REQUIRE(db.insert_allocation(held("shrink", 0, "gpu03", 4, "2025-12-02T00:00:00", "2025-12-02T02:00:00")));
  REQUIRE(db.insert_allocation(held("shrink", 1, "gpu02", 4, "2025-12-02T02:30:00", "2025-12-02T06:30:00")));
  REQUIRE(db.insert_allocation(held("cpu", 0, "cpu01", 4, "2025-12-01T00:00:00", "2025-12-01T10:00:00", "slot")));
  REQUIRE(db.insert_failure({"shrink", 0, "gpu03", std::nullopt, "host.lost", true, at("2025-12-02T02:00:00"), 1800000}));
  REQUIRE(db.insert_failure({"shrink", 0, "gpu02", 0, "worker.exited", false, at("2025-12-02T02:00:01"), 1799000}));
  REQUIRE(db.insert_host_event({"shrink", "gpu03", "lost", "agent connection closed", at("2025-12-02T02:00:00")}));
  REQUIRE(db.insert_host_event({"shrink", "gpu03", "excluded", "lost twice within 1h", at("2025-12-02T02:10:00")}));
  REQUIRE(db.append_audit({at("2025-11-30T21:59:00"), "alice", "submit", "cross", "", "job.yaml", "ok"}));
  REQUIRE(db.append_audit({at("2025-12-02T03:00:00"), "root (sudo from alice)", "stop", "shrink", "", "--grace 10s", "ok"}));
  REQUIRE(db.append_audit({at("2025-12-02T04:00:00"), "bob", "resume", "shrink", "", "", "ok"}));
  REQUIRE(db.commit());
}

json parsed(const DtrainProcess& process) {
  INFO(process.err());
  REQUIRE(process.exit_code == 0);
  json out = json::parse(process.out(), nullptr, false);
  REQUIRE(out.is_object());
  return out;
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("dtrain history: newest first, hand-computed hours, filters, --json, --csv, --limit") {
  DtrainEnv env;
  fill_registry(env.home());
  json all = parsed(env.run({"history", "--json"}));
  CHECK(all["matching"] == 3);
  REQUIRE(all["runs"].size() == 3);
  CHECK(all["runs"][0]["id"] == "shrink");
  CHECK(all["runs"][1]["id"] == "cpu");
  CHECK(all["runs"][2]["id"] == "cross");
  const json& shrink = all["runs"][0];
  CHECK(shrink["gpu_hours"].get<double>() == doctest::Approx(34.0));
  CHECK(shrink["failures"] == 2);
  CHECK(shrink["root_cause_failures"] == 1);
  CHECK(shrink["duration_s"].get<double>() == doctest::Approx(6.5 * 3600));
  CHECK(shrink["submitted"] == "2025-12-01T23:59:00.000Z");
  CHECK(shrink["exit_reason"] == "rank 0 diverged");
  CHECK(all["runs"][1]["slot_hours"].get<double>() == doctest::Approx(40.0));
  CHECK(all["runs"][2]["gpu_hours"].get<double>() == doctest::Approx(48.0));

  json vision = parsed(env.run({"history", "--tenant", "vision", "--state", "succeeded", "--json"}));
  REQUIRE(vision["runs"].size() == 1);
  CHECK(vision["runs"][0]["id"] == "cross");
  CHECK(parsed(env.run({"history", "--user", "carol", "--since", "2025-11", "--until", "2025-12", "--json"}))["matching"] == 1);

  DtrainProcess text = env.run({"history", "--limit", "1"});
  CHECK(text.exit_code == 0);
  CHECK(has(text.out(), "SUBMITTED (UTC)"));
  CHECK(has(text.out(), "2025-12-01 23:59:00"));
  CHECK(has(text.out(), "6h30m"));
  CHECK(has(text.out(), "1/2"));  // root causes / all failures
  CHECK(has(text.out(), "1 of 3 matching runs, newest first; --limit 0 shows all"));
  CHECK_FALSE(has(text.out(), "cross-job"));

  DtrainProcess csv = env.run({"history", "--tenant", "nlp", "--csv"});
  CHECK(csv.exit_code == 0);
  CHECK(csv.out() ==
        "id,submitted,user,tenant,name,state,duration_s,gpu_hours,slot_hours,failures,root_cause_failures,exit_code,exit_reason\n"
        "cpu,2025-11-30T23:50:00.000Z,carol,nlp,cpu-job,succeeded,36000,0.000000,40.000000,0,0,0,\n");
  CHECK(env.run({"history", "--tenant", "nobody"}).out() == "no runs match\n");
}

TEST_CASE("dtrain audit: oldest first, the person either side of a sudo, --json") {
  DtrainEnv env;
  fill_registry(env.home());
  json all = parsed(env.run({"audit", "--json"}));
  REQUIRE(all["rows"].size() == 3);
  CHECK(all["rows"][0]["action"] == "submit");
  CHECK(all["rows"][1]["actor"] == "root (sudo from alice)");
  CHECK(all["rows"][1]["arguments"] == "--grace 10s");
  CHECK(all["rows"][2]["time"] == "2025-12-02T04:00:00.000Z");
  json alice = parsed(env.run({"audit", "--actor", "alice", "--json"}));
  REQUIRE(alice["rows"].size() == 2);
  CHECK(alice["rows"][1]["action"] == "stop");
  CHECK(parsed(env.run({"audit", "--run", "shrink", "--action", "resume", "--json"}))["rows"].size() == 1);
  DtrainProcess newest = env.run({"audit", "--limit", "1"});
  CHECK(newest.exit_code == 0);
  CHECK(has(newest.out(), "TIME (UTC)"));
  CHECK(has(newest.out(), "2025-12-02 04:00:00 bob"));
  CHECK_FALSE(has(newest.out(), "alice"));
  CHECK(has(newest.out(), "the newest 1 rows; --limit 0 shows all"));
}

TEST_CASE("dtrain hosts --reliability: root causes blamed, cascades counted, exclusions, no spec needed") {
  DtrainEnv env;
  fill_registry(env.home());
  json report = parsed(env.run({"hosts", "--reliability", "--json"}));
  std::map<std::string, json> by_host;
  for (const json& host : report["hosts"]) by_host[host["host"]] = host;
  REQUIRE(by_host.size() == 4);
  CHECK(by_host["gpu03"]["gpu_hours"].get<double>() == doctest::Approx(8.0));
  CHECK(by_host["gpu03"]["root_cause_failures"] == 1);
  CHECK(by_host["gpu03"]["root_cause_failures_per_1000_hours"].get<double>() == doctest::Approx(125.0));
  CHECK(by_host["gpu03"]["times_lost"] == 1);
  CHECK(by_host["gpu03"]["times_excluded"] == 1);
  CHECK(by_host["gpu03"]["last_excluded"] == "2025-12-02T02:10:00.000Z");
  CHECK(by_host["gpu03"]["last_excluded_reason"] == "lost twice within 1h");
  CHECK(by_host["gpu02"]["gpu_hours"].get<double>() == doctest::Approx(26.0));
  CHECK(by_host["gpu02"]["failures"] == 1);
  CHECK(by_host["gpu02"]["root_cause_failures"] == 0);
  CHECK(by_host["cpu01"]["slot_hours"].get<double>() == doctest::Approx(40.0));

  // Since 2025-12-02: gpu01 and cpu01 held nothing and had nothing happen.
  json later = parsed(env.run({"hosts", "--reliability", "--since", "2025-12-02", "--json"}));
  CHECK(later["hosts"].size() == 2);

  DtrainProcess text = env.run({"hosts", "--reliability"});
  CHECK(text.exit_code == 0);
  CHECK(has(text.out(), "LAST EXCLUDED (UTC)"));
  CHECK(has(text.out(), "2025-12-02 02:10:00 lost twice within 1h"));
  CHECK(has(text.out(), "125.00"));

  DtrainProcess with_spec = env.run({"hosts", "job.yaml", "--reliability"});
  CHECK(with_spec.exit_code == 2);
  CHECK(has(with_spec.err(), "--reliability reads the run registry and takes no job spec"));
  DtrainProcess neither = env.run({"hosts"});
  CHECK(neither.exit_code == 2);
  CHECK(has(neither.err(), "give a job spec"));
}

TEST_CASE("dtrain usage: cost from config.yaml, and a bad config names its file:line:col") {
  DtrainEnv env;
  fill_registry(env.home());
  DtrainProcess plain = env.run({"usage", "--csv"});
  CHECK(plain.out() == "tenant,runs,gpu_hours,slot_hours\nnlp,1,0.000000,40.000000\nvision,2,82.000000,0.000000\n");

  // vision: 48 + 34 = 82 GPU-h × 2.50 = 205.00; nlp: 40 slot-h × 0.10 = 4.00.
  write_text(env.home() + "/config.yaml", "cost:\n  currency: EUR\n  per_gpu_hour: 2.50\n  per_slot_hour: 0.10\n");
  DtrainProcess csv = env.run({"usage", "--csv"});
  CHECK(csv.out() == "tenant,runs,gpu_hours,slot_hours,cost,currency\n"
                     "nlp,1,0.000000,40.000000,4.00,EUR\nvision,2,82.000000,0.000000,205.00,EUR\n");
  json report = parsed(env.run({"usage", "--by", "month", "--json"}));
  CHECK(report["currency"] == "EUR");
  REQUIRE(report["rows"].size() == 2);  // 2025-11: cross's 2 h × 8 = 16 GPU-h; 2025-12 the rest
  CHECK(report["rows"][0]["cost"].get<double>() == doctest::Approx(16 * 2.5));
  CHECK(report["rows"][1]["cost"].get<double>() == doctest::Approx(66 * 2.5 + 4.0));
  DtrainProcess text = env.run({"usage"});
  CHECK(has(text.out(), "COST (EUR)"));
  CHECK(has(text.out(), "cost at 2.50 EUR per GPU-hour"));
  CHECK(has(text.out(), "209.00"));  // the total

  write_text(env.home() + "/config.yaml", "cost:\n  per_gpu_hour: lots\nquotas:\n  tenant: {vision: 5}\n");
  DtrainProcess bad = env.run({"usage"});
  CHECK(bad.exit_code == 2);
  CHECK(has(bad.err(), env.home() + "/config.yaml:2:17: cost.per_gpu_hour: expected a number of at least 0"));
  CHECK(has(bad.err(), "config.yaml:4:3: quotas.tenant: unknown key 'tenant'; did you mean 'tenants'?"));
}

TEST_CASE("dtrain usage --capacity: busy and idle per host per day, and the hosts that stand out") {
  DtrainEnv env;
  fill_registry(env.home());
  json report = parsed(env.run({"usage", "--capacity", "--since", "2025-12-02", "--until", "2025-12-03", "--json"}));
  REQUIRE(report["days"].size() == 4);  // every host known, one day
  std::map<std::string, json> by_host;
  for (const json& day : report["days"]) by_host[day["host"]] = day;
  CHECK(by_host["gpu02"]["day"] == "2025-12-02");
  CHECK(by_host["gpu02"]["capacity"] == 4);
  CHECK(by_host["gpu02"]["busy_unit_hours"].get<double>() == doctest::Approx(26.0));
  CHECK(by_host["gpu02"]["idle_unit_hours"].get<double>() == doctest::Approx(70.0));
  CHECK(by_host["gpu01"]["idle_unit_hours"].get<double>() == doctest::Approx(192.0));
  CHECK(by_host["cpu01"]["resource"] == "slot");
  CHECK(report["standing_out"].empty());
  CHECK(report["standing_out_rule"]["min_unit_hours"] == 100);

  DtrainProcess text = env.run({"usage", "--capacity", "--since", "2025-11-30", "--until", "2025-12-03"});
  CHECK(text.exit_code == 0);
  CHECK(has(text.out(), "Capacity by host and day, 2025-11-30 to 2025-12-03 (UTC)"));
  CHECK(has(text.out(), "the registry has no\ninventory"));
  CHECK(has(text.out(), "gpu01 2025-11-30 GPU         8   24.0      16.00     176.00    8.3%"));
  CHECK(has(text.out(), "Hosts whose failure rate stands out"));
}

TEST_CASE("bad flags exit 2 and say what is wrong") {
  DtrainEnv env;
  fill_registry(env.home());
  struct Case {
    std::vector<std::string> args;
    std::string says;
  };
  for (const Case& bad : {Case{{"history", "--since", "yesterday"}, "--since 'yesterday' is not a date; use YYYY-MM-DD or YYYY-MM"},
                          Case{{"history", "--limit", "-1"}, "--limit"},
                          Case{{"history", "--json", "--csv"}, "excludes"},
                          Case{{"audit", "--until", "2025-12", "--since", "2026-01"}, "--until 2025-12 is not after --since 2026-01"},
                          Case{{"audit", "--who", "alice"}, "--who"},
                          Case{{"usage", "--capacity", "--by", "host"}, "excludes"},
                          Case{{"hosts", "--reliability", "--since", "2025-02-30"}, "'2025-02-30' is not a date"}}) {
    DtrainProcess process = env.run(bad.args);
    INFO(bad.args[0] << " " << bad.args[1] << ": " << process.err());
    CHECK(process.exit_code == 2);
    CHECK(has(process.err(), bad.says));
  }
}

TEST_CASE("a missing or damaged registry: every read command names the file and `dtrain registry rebuild`") {
  DtrainEnv env;
  std::string registry = env.home() + "/registry.db";
  const std::vector<std::vector<std::string>> commands = {
      {"history"}, {"audit"}, {"hosts", "--reliability"}, {"usage", "--capacity"}};
  for (const auto& command : commands) {
    DtrainProcess missing = env.run(command);
    INFO(command[0] << ": " << missing.err());
    CHECK(missing.exit_code == 2);
    CHECK(has(missing.err(), registry));
    CHECK(has(missing.err(), "`dtrain registry rebuild` builds it"));
  }
  fill_registry(env.home());
  std::filesystem::remove(registry + "-wal");
  std::filesystem::remove(registry + "-shm");
  write_text(registry, std::string(4096, 'x'));
  for (const auto& command : commands) {
    DtrainProcess damaged = env.run(command);
    INFO(command[0] << ": " << damaged.err());
    CHECK(damaged.exit_code == 2);
    CHECK(has(damaged.err(), registry));
    CHECK(has(damaged.err(), "dtrain registry rebuild"));
  }
}
