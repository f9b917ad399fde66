// Host resources end to end: `dtrain submit` on localhost with the agent's NVML pointed at the
// fake (tests/fakes/fake_nvml.cpp). metrics.jsonl carries the fake GPUs' numbers and the /proc
// numbers of a worker that burns CPU; an Xid and a rising uncorrected ECC count become events.

#include <doctest/doctest.h>
#include <stdlib.h>

#include "tests/integration/dtrain_runner.h"

using namespace dtrain::testing;

namespace {

// The newest metrics.jsonl line with host resources whose worker shows > 20 % CPU (a busy one on a
// loaded 2-core machine; idle reads ~0), or null.
nlohmann::json busy_host_line(const std::string& run_dir) {
  std::istringstream lines(read_text(run_dir + "/metrics.jsonl"));
  std::string line;
  nlohmann::json found;
  while (std::getline(lines, line)) {
    nlohmann::json entry = nlohmann::json::parse(line, nullptr, false);
    if (!entry.is_object() || !entry.contains("hosts")) continue;
    for (const auto& host : entry["hosts"]) {
      for (const auto& worker : host.value("workers", nlohmann::json::array())) {
        if (worker.value("cpu_percent", 0.0) > 20) found = entry;
      }
    }
  }
  return found;
}

}  // namespace

TEST_CASE("a local run's metrics.jsonl carries the fake GPU's numbers and a busy worker's CPU, Xid and ECC become events") {
  DtrainEnv env;
  std::string values = env.dir.path + "/nvml-values";
  write_text(values, "gpus=2\nutilization=91\nmemory_used_mb=30000\nmemory_total_mb=81559\npower_mw=412000\n"
                     "temperature=77\necc_corrected=5\necc_uncorrected=0\nxid=1:79\n");
  ::setenv("DTRAIN_NVML_LIBRARY", DTRAIN_FAKE_NVML, 1);
  ::setenv("DTRAIN_FAKE_NVML_VALUES", values.c_str(), 1);
  std::string stop = env.dir.path + "/stop";
  std::string spec = env.write_spec(
      "busy.yaml", "version: 1\nname: busy\nslots_per_host: 1\nworker:\n  command: [/bin/sh, -c, 'while [ ! -e " + stop +
                       " ]; do :; done']\nheartbeat: {interval: 200ms, timeout: 3s, hang_timeout: 60s}\nstop_grace: 2s\n");
  DtrainProcess process = env.start({"submit", spec});
  ::unsetenv("DTRAIN_NVML_LIBRARY");
  ::unsetenv("DTRAIN_FAKE_NVML_VALUES");
  REQUIRE(wait_until([&] { return env.run_dirs().size() == 1; }, 30'000));
  std::string dir = env.run_dirs()[0];
  nlohmann::json line;
  CHECK(wait_until([&] { return !(line = busy_host_line(dir)).is_null(); }, 60'000));
  // The ECC count rises while the run goes on: the next sample sees it.
  write_text(values, "gpus=2\nutilization=91\nmemory_used_mb=30000\nmemory_total_mb=81559\npower_mw=412000\n"
                     "temperature=77\necc_corrected=5\necc_uncorrected=2\nxid=1:79\n");
  CHECK(wait_until([&] { return !events_named(read_events(dir + "/events.jsonl"), "gpu.ecc").empty(); }, 30'000));
  write_text(stop, "");
  process.wait(60'000);
  CHECK(process.exit_code == 0);

  REQUIRE(line.is_object());
  REQUIRE(line["hosts"].size() == 1);
  const nlohmann::json& host = line["hosts"][0];
  CHECK(host["host"] == "localhost");
  CHECK(host["gpu_source"] == "nvml");
  CHECK(host["memory_total_mb"].get<int64_t>() > 0);
  CHECK(host["cpu_percent"].get<double>() > 0);
  REQUIRE(host["gpus"].size() == 2);
  CHECK(host["gpus"][1]["index"] == 1);
  CHECK(host["gpus"][0]["utilization_percent"] == 91);
  CHECK(host["gpus"][0]["memory_used_mb"] == 30000);
  CHECK(host["gpus"][0]["memory_total_mb"] == 81559);
  CHECK(host["gpus"][0]["power_w"] == 412);
  CHECK(host["gpus"][0]["temperature_c"] == 77);
  CHECK(host["gpus"][0]["ecc_corrected"] == 5);
  REQUIRE(host["workers"].size() == 1);
  CHECK(host["workers"][0]["rank"] == 0);
  CHECK(host["workers"][0]["rss_mb"].get<int64_t>() >= 0);

  auto events = read_events(dir + "/events.jsonl");
  auto xids = events_named(events, "gpu.xid");
  REQUIRE(xids.size() == 1);  // delivered once by NVML, recorded once
  CHECK(xids[0]["host"] == "localhost");
  CHECK(xids[0]["gpu"] == 1);
  CHECK(xids[0]["xid"] == 79);
  auto ecc = events_named(events, "gpu.ecc");
  REQUIRE(ecc.size() == 2);  // both fake GPUs report the same count
  CHECK(ecc[0]["uncorrected"] == 2);
  CHECK(ecc[0]["previous"] == 0);
  check_nothing_left(run_id_of(dir));
}
