// `dtrain registry rebuild` and `dtrain usage` as a user runs them: the real binary over a real
// run (dtrain-sim: the real driver and supervisor over simulated agents, with a host lost) and a
// fabricated run across a month boundary with hand-computed hours; a missing and a damaged
// registry say what to do.

#include <doctest/doctest.h>

#include <filesystem>

#include <nlohmann/json.hpp>

#include "launcher/base/child_process.h"
#include "tests/integration/dtrain_runner.h"

using namespace dtrain;
using namespace dtrain::testing;

namespace {

/// A run of 4 GPUs on gpu01 from 2026-10-31 22:00 to 2026-11-01 04:00 UTC: 8 GPU-hours in
/// October, 16 in November.
void write_month_crossing_run(const std::string& home) {
  std::string dir = home + "/runs/month-cross";
  std::filesystem::create_directories(dir);
  std::string events = R"({"dtrain_events":1,"run_id":"month-cross","created":"2026-10-31T21:59:00.000Z"})" "\n"
      R"({"ts":"2026-10-31T21:59:00.000Z","ev":"run.submitted","name":"mc","hosts":["gpu01"],"world_size":4})" "\n"
      R"({"ts":"2026-10-31T21:59:30.000Z","ev":"host.facts","host":"gpu01","gpus":[{"index":0},{"index":1},{"index":2},{"index":3}]})" "\n"
      R"({"ts":"2026-10-31T22:00:00.000Z","ev":"plan.generation","gen":0,"hosts":["gpu01"],"world_size":4})" "\n"
      R"({"ts":"2026-11-01T04:00:00.000Z","ev":"run.finished","state":"succeeded","exit_code":0})" "\n";
  write_text(dir + "/events.jsonl", events);
  write_text(dir + "/state.json", R"({"version":1,"name":"mc","tenant":"team-a","state":"succeeded","exit_code":0})");
}

}  // namespace

TEST_CASE("registry rebuild and usage over a real run and a month-crossing one") {
  DtrainEnv env;
  std::string registry = env.home() + "/registry.db";

  DtrainProcess before = env.run({"usage"});
  CHECK(before.exit_code == 2);
  CHECK(before.err().find(registry) != std::string::npos);
  CHECK(before.err().find("dtrain registry rebuild") != std::string::npos);

  Result<CommandOutput> sim = run_command({std::string(DTRAIN_BINARY_DIR) + "/cli/dtrain-sim", "--hosts", "4", "--slots", "2",
                                           "--steady", "1s", "--fault", "host-loss", "--home", env.home()},
                                          Millis(120000));
  REQUIRE(sim.ok());
  REQUIRE_MESSAGE(sim->exit_code == 0, sim->err.substr(0, 2000));
  nlohmann::json measured = nlohmann::json::parse(sim->out.substr(sim->out.rfind("\n{") + 1), nullptr, false);
  REQUIRE(measured.is_object());
  std::string victim = measured.value("victim", "");
  REQUIRE_FALSE(victim.empty());
  write_month_crossing_run(env.home());

  DtrainProcess rebuilt = env.run({"registry", "rebuild"});
  INFO(rebuilt.err());
  REQUIRE(rebuilt.exit_code == 0);
  CHECK(rebuilt.out().find("2 runs") != std::string::npos);

  DtrainProcess months = env.run({"usage", "--by", "month", "--since", "2026-10", "--until", "2026-11-15", "--csv"});
  CHECK(months.exit_code == 0);
  CHECK(months.out() == "month,runs,gpu_hours,slot_hours\n2026-10,1,8.000000,0.000000\n2026-11,1,16.000000,0.000000\n");

  // The real run: 4 simulated hosts with GPUs, one lost mid-way; it holds its GPUs for less time.
  DtrainProcess hosts = env.run({"usage", "--by", "host", "--json"});
  REQUIRE(hosts.exit_code == 0);
  nlohmann::json report = nlohmann::json::parse(hosts.out(), nullptr, false);
  REQUIRE(report.is_object());
  REQUIRE(report["rows"].size() == 4 + 1);  // the simulated hosts and gpu01
  double victim_hours = 0, other_hours = 0;
  for (const nlohmann::json& row : report["rows"]) {
    if (row["host"] == "gpu01") continue;
    CHECK(row["gpu_hours"].get<double>() > 0);
    CHECK(row["slot_hours"].get<double>() == 0);
    if (row["host"] == victim) victim_hours = row["gpu_hours"].get<double>();
    else other_hours = row["gpu_hours"].get<double>();
  }
  CHECK(victim_hours > 0);
  CHECK(victim_hours < other_hours);

  DtrainProcess text = env.run({"usage", "--by", "tenant"});
  CHECK(text.exit_code == 0);
  CHECK(text.out().find("GPU-hours by tenant") != std::string::npos);
  CHECK(text.out().find("team-a") != std::string::npos);
  CHECK(text.out().find("24.00") != std::string::npos);

  // A damaged registry: the error names the file and the repair, and the repair works.
  std::filesystem::remove(registry + "-wal");
  std::filesystem::remove(registry + "-shm");
  write_text(registry, std::string(4096, 'x'));
  DtrainProcess damaged = env.run({"usage"});
  CHECK(damaged.exit_code == 2);
  CHECK(damaged.err().find(registry) != std::string::npos);
  CHECK(damaged.err().find("dtrain registry rebuild") != std::string::npos);
  DtrainProcess repaired = env.run({"registry", "rebuild"});
  CHECK(repaired.exit_code == 0);
  CHECK(env.run({"usage", "--by", "month", "--since", "2026-10", "--until", "2026-11-15", "--csv"}).out() == months.out());
}
