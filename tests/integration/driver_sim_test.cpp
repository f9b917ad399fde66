// The real driver and supervisor (run::submit) over simulated agents (sim::FakeCluster):
// host loss, partition, hang and crash reach the same recovery paths as with real processes,
// without any process or network. The run log is real (events.jsonl, state.json), in a
// temporary DTRAIN_HOME.

#include <doctest/doctest.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <thread>

#include "tests/integration/sim_run.h"

using namespace dtrain;
using namespace dtrain::testing;

namespace {

/// `inject` once every rank beats; the workers finish once the generation after the fault has
/// stepped. `recovered`: a new generation started and stepped.
struct SimRecovery : SimRun {
  bool recovered = false;
  int submit(const std::string& spec, const std::function<void(sim::FakeCluster&)>& inject) {
    return run(spec, [&](sim::FakeCluster& cluster, const std::atomic<bool>& ended) {
      int before = cluster.newest_generation();
      inject(cluster);
      wait_until([&] { return ended || (cluster.newest_generation() > before && cluster.newest_step() >= 3); }, 30000);
      recovered = !ended && cluster.newest_generation() > before;
    });
  }
};

}  // namespace

TEST_CASE("simulated cluster: a host that dies is replaced by the spare, world size kept, run succeeds") {
  SimRecovery sim;
  std::string spec = sim_spec(4, 2, "spares: [spare1]\nelastic: {max_restarts: 2}\n");
  CHECK(sim.submit(spec, [](sim::FakeCluster& cluster) { cluster.kill_host("sim3"); }) == 0);
  CHECK(sim.recovered);
  auto events = sim.events();
  auto lost = events_named(events, "host.lost");
  REQUIRE(lost.size() == 1);
  CHECK(lost[0]["host"] == "sim3");
  auto completed = events_named(events, "recovery.completed");
  REQUIRE(completed.size() == 1);
  CHECK(completed[0]["world_size"] == 8);
  auto generations = events_named(events, "plan.generation");
  REQUIRE(generations.size() == 2);
  CHECK(generations[1].dump().find("spare1") != std::string::npos);
  CHECK(generations[1].dump().find("\"sim3\"") == std::string::npos);
  nlohmann::json state = nlohmann::json::parse(read_text(sim.run_dir() + "/state.json"));
  CHECK(state["state"] == "succeeded");
}

TEST_CASE("simulated cluster: a partitioned host is lost to silence after heartbeat.timeout and the job shrinks") {
  SimRecovery sim;
  std::string spec = sim_spec(4, 2, "elastic: {max_restarts: 2, min_hosts: 3}\n");
  CHECK(sim.submit(spec, [](sim::FakeCluster& cluster) { cluster.partition_host("sim2"); }) == 0);
  CHECK(sim.recovered);
  auto events = sim.events();
  auto lost = events_named(events, "host.lost");
  REQUIRE(lost.size() == 1);
  CHECK(lost[0]["host"] == "sim2");
  CHECK(lost[0]["silent_ms"].get<int64_t>() > 1000);  // heartbeat.timeout, by its own measure
  auto completed = events_named(events, "recovery.completed");
  REQUIRE(completed.size() == 1);
  CHECK(completed[0]["world_size"] == 6);
}

TEST_CASE("simulated cluster: a rank that stops beating is hung, sampled and restarted") {
  SimRecovery sim;
  std::string spec = sim_spec(3, 2, "elastic: {max_restarts: 1}\n");
  CHECK(sim.submit(spec, [](sim::FakeCluster& cluster) { cluster.hang_rank(3); }) == 0);
  CHECK(sim.recovered);
  auto events = sim.events();
  auto hangs = events_named(events, "worker.hang");
  REQUIRE(hangs.size() == 1);
  CHECK(hangs[0]["rank"] == 3);
  auto samples = events_named(events, "worker.sample");
  REQUIRE(samples.size() == 1);
  CHECK(read_text(samples[0]["path"].get<std::string>()).find("State:\tT (stopped)") != std::string::npos);
}

TEST_CASE("simulated cluster: a crash past elastic.max_restarts ends the run with the rank's root cause") {
  SimRecovery sim;
  std::string spec = sim_spec(2, 2, "");  // no restarts allowed
  CHECK(sim.submit(spec, [](sim::FakeCluster& cluster) { cluster.crash_rank(2, 7); }) == 1);
  CHECK_FALSE(sim.recovered);
  nlohmann::json state = nlohmann::json::parse(read_text(sim.run_dir() + "/state.json"));
  CHECK(state["state"] == "failed");
  CHECK(state["root_cause"]["rank"] == 2);
  CHECK(state["root_cause"]["code"] == 7);
}

TEST_CASE("simulated cluster: past 64 ranks metrics.jsonl holds a summary and the ranks that lag, not every rank") {
  SimRecovery sim;
  // 20 hosts × 8 = 160 ranks; a hang_timeout long enough for a metrics sample to see the lag.
  std::string spec = "version: 1\nname: sim\nslots_per_host: 8\nhosts: ['sim[1-20]']\n"
                     "worker: {command: [/simulated/train]}\n"
                     "heartbeat: {interval: 100ms, timeout: 1s, hang_timeout: 60s}\nstop_grace: 1s\n";
  CHECK(sim.submit(spec, [&](sim::FakeCluster& cluster) {
    cluster.hang_rank(77);
    // Two metrics samples (every 5 s) after the hang, then the job ends.
    std::string path = sim.run_dir() + "/metrics.jsonl";
    wait_until([&] { return read_text(path).find("\"outliers\":[{\"rank\":77") != std::string::npos; }, 20000);
    cluster.finish_all();
  }) == 0);
  std::string metrics = read_text(sim.run_dir() + "/metrics.jsonl");
  INFO(metrics.substr(0, 2000));
  CHECK(metrics.find("\"ranks_reporting\":160") != std::string::npos);
  CHECK(metrics.find("\"outliers\":[{\"rank\":77") != std::string::npos);
  CHECK(metrics.find("\"outliers_total\":1") != std::string::npos);
  CHECK(metrics.find("\"ranks\":[") == std::string::npos);  // no per-rank list at this size
}
