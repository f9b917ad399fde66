// The driver through its seams: a stalled run-log file system (RunLogWriter's hook) and a clock
// that runs fast (ScaledClock, shared with the simulated agents), over sim::FakeCluster. What
// end-to-end tests cannot reach in their time: a $DTRAIN_HOME that hangs for longer than
// heartbeat.timeout, and the default 30 s / 10 min timeouts.

#include <doctest/doctest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "launcher/base/clock.h"
#include "tests/integration/sim_run.h"

using namespace dtrain;
using namespace dtrain::testing;

TEST_CASE("a run-log file system stalled for 3 x heartbeat.timeout: pings go on, no agent fences, nothing is lost") {
  SimRun sim;
  // Every write of the run log (events.jsonl, ranks/*.log, metrics, plans) blocks while the
  // stall lasts, as on a hung NFS server.
  std::atomic<int64_t> stall_until_ms{0};
  std::atomic<int> stalled_writes{0};
  SystemClock real;
  sim.seams.before_runlog_write = [&] {
    if (real.monotonic_ms() >= stall_until_ms) return;
    ++stalled_writes;
    while (real.monotonic_ms() < stall_until_ms) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  };
  int64_t step_at_stall = 0, step_after_stall = 0;
  std::string spec = sim_spec(3, 2, "elastic: {max_restarts: 1}\n", "{interval: 100ms, timeout: 1s, hang_timeout: 10s}");
  CHECK(sim.run(spec, [&](sim::FakeCluster& cluster, const std::atomic<bool>& ended) {
    step_at_stall = cluster.newest_step();
    stall_until_ms = real.monotonic_ms() + 3000;
    // A crash during the stall: its events must queue, not block the loop's handling of it.
    cluster.crash_rank(1, 3);
    wait_until([&] { return ended.load() || real.monotonic_ms() >= stall_until_ms + 500; }, 10000);
    step_after_stall = cluster.newest_step();
  }) == 0);
  CHECK(stalled_writes > 0);
  CHECK(sim.cluster.silence_fences() == 0);
  CHECK(sim.cluster.longest_driver_silence_ms() < 1000);  // heartbeat.timeout
  auto events = sim.events();
  CHECK(events_named(events, "host.lost").empty());
  // The crash was handled during the stall (recovered, the new generation stepped) and every
  // event of it reached events.jsonl afterwards, in order.
  CHECK(step_after_stall >= 1);
  REQUIRE(events_named(events, "failure.detected").size() == 1);
  CHECK(events_named(events, "failure.detected")[0]["rank"] == 1);
  CHECK(events_named(events, "recovery.completed").size() == 1);
  REQUIRE(!events.empty());
  CHECK(events.back()["ev"] == "run.finished");
  INFO("step at the stall's start " << step_at_stall);
}

TEST_CASE("default heartbeat.timeout (10 s) and hang_timeout (60 s) on a 50x clock: a partitioned host is lost by its silence") {
  SimRun sim(50);
  std::string spec = sim_spec(3, 1, "elastic: {max_restarts: 1, min_hosts: 2}\n", "{}");
  CHECK(sim.run(spec, [&](sim::FakeCluster& cluster, const std::atomic<bool>& ended) {
    int before = cluster.newest_generation();
    cluster.partition_host("sim3");
    wait_until([&] { return ended.load() || (cluster.newest_generation() > before && cluster.newest_step() >= 3); }, 20000);
  }) == 0);
  auto lost = events_named(sim.events(), "host.lost");
  REQUIRE(lost.size() == 1);
  CHECK(lost[0]["host"] == "sim3");
  int64_t silent = lost[0]["silent_ms"].get<int64_t>();
  CHECK(silent >= 10'000);
  CHECK(silent < 20'000);
  CHECK(sim.cluster.silence_fences() == 0);  // the survivors heard their pings all along
}

TEST_CASE("a checkpoint save longer than hang_timeout but within checkpoint_timeout is not a hang (50x clock)") {
  SimRun sim(50);
  const ScaledClock& clock = sim.clock;
  // hang_timeout 20 s, checkpoint_timeout 2 min: a 60 s save is fine.
  std::string spec = sim_spec(2, 1, "", "{interval: 1s, timeout: 10s, hang_timeout: 20s, checkpoint_timeout: 2m}");
  CHECK(sim.run(spec, [&](sim::FakeCluster& cluster, const std::atomic<bool>& ended) {
    cluster.set_saving(0, true);
    int64_t until = clock.monotonic_ms() + 60'000;
    wait_until([&] { return ended.load() || clock.monotonic_ms() >= until; }, 20000);
    cluster.set_saving(0, false);
    int64_t step = cluster.newest_step();
    wait_until([&] { return ended.load() || cluster.newest_step() >= step + 3; }, 20000);
  }) == 0);
  auto events = sim.events();
  CHECK(events_named(events, "worker.hang").empty());
  CHECK(events_named(events, "failure.detected").empty());
}

TEST_CASE("a checkpoint save past checkpoint_timeout is a hang of that rank, named as a save (50x clock)") {
  SimRun sim(50);
  const ScaledClock& clock = sim.clock;
  std::string spec = sim_spec(2, 1, "", "{interval: 1s, timeout: 10s, hang_timeout: 20s, checkpoint_timeout: 1m}");
  int64_t save_started = 0;
  CHECK(sim.run(spec, [&](sim::FakeCluster& cluster, const std::atomic<bool>& ended) {
    save_started = clock.monotonic_ms();
    cluster.set_saving(1, true);
    wait_until([&] { return ended.load(); }, 30000);
  }) != 0);
  auto hangs = events_named(sim.events(), "worker.hang");
  REQUIRE(hangs.size() == 1);
  INFO(hangs[0].dump());
  CHECK(hangs[0]["rank"] == 1);
  CHECK(hangs[0].dump().find("checkpoint") != std::string::npos);
  auto failures = events_named(sim.events(), "failure.detected");
  REQUIRE(!failures.empty());
  CHECK(failures[0]["detail"].get<std::string>().find("checkpoint_timeout") != std::string::npos);
}

TEST_CASE("a Slurm time-limit lookup that takes 3 s (a busy slurmctld) does not hold the loop: pings go on, its answer is used") {
  // A fake squeue first on PATH: 3 s to answer that the job has 4 s left. With
  // checkpoint.before_walltime 1 s the checkpoint is due as soon as the answer arrives.
  TempDir bin;
  std::string squeue = bin.path + "/squeue";
  {
    std::ofstream script(squeue);
    script << "#!/bin/sh\nsleep 3\necho 0:04\n";
  }
  std::filesystem::permissions(squeue, std::filesystem::perms::owner_all);
  std::string old_path = std::getenv("PATH") ? std::getenv("PATH") : "";
  ::setenv("PATH", (bin.path + ":" + old_path).c_str(), 1);
  ::setenv("SLURM_JOB_ID", "4242", 1);
  SimRun sim;
  std::string spec = sim_spec(3, 2, "checkpoint: {before_walltime: 1s}\n",
                              "{interval: 100ms, timeout: 1s, hang_timeout: 10s}");
  int64_t step_at_start = -1, step_at_request = -1;
  CHECK(sim.run(spec, [&](sim::FakeCluster& cluster, const std::atomic<bool>& ended) {
    step_at_start = cluster.newest_step();
    wait_until([&] { return ended.load() || !events_named(sim.events(), "checkpoint.requested").empty(); }, 15000);
    step_at_request = cluster.newest_step();
  }) == 0);
  ::setenv("PATH", old_path.c_str(), 1);
  ::unsetenv("SLURM_JOB_ID");
  // The loop served the agents while squeue slept: no gap near heartbeat.timeout, no host lost.
  CHECK(sim.cluster.longest_driver_silence_ms() < 1000);
  CHECK(sim.cluster.silence_fences() == 0);
  auto events = sim.events();
  CHECK(events_named(events, "host.lost").empty());
  // The answer came back to the loop and was acted on.
  auto requested = events_named(events, "checkpoint.requested");
  REQUIRE(requested.size() == 1);
  CHECK(requested[0].dump().find("before_walltime") != std::string::npos);
  CHECK(step_at_request > step_at_start);  // the job trained on meanwhile
}

TEST_CASE("a simulated relay tree: a relay's loss costs only its own host, the hosts it carried are re-attached with their workers") {
  SimRun sim;
  sim.seams.relay_over_transport = true;
  // 12 hosts and a spare, fanout 3: four relays, sim1 the first (relay_tree.cpp).
  std::string spec = sim_spec(12, 2, "spares: [sim13]\nelastic: {max_restarts: 1}\nscale: {tree: on, fanout: 3}\n");
  CHECK(sim.run(spec, [&](sim::FakeCluster& cluster, const std::atomic<bool>& ended) {
    int generation = cluster.newest_generation();
    cluster.kill_host("sim1");
    wait_until([&] { return ended.load() || (cluster.newest_generation() > generation && cluster.newest_step() >= 2); }, 20000);
  }) == 0);
  auto events = sim.events();
  std::map<std::string, std::string> relayed_by;
  for (const auto& connected : events_named(events, "host.connected")) {
    relayed_by[connected["host"]] = connected.value("relayed_by", "");
  }
  CHECK(relayed_by["sim1"] == "");
  CHECK(relayed_by["sim13"] != "");  // the spare is relayed, never a relay
  std::set<std::string> carried_by_sim1;
  for (const auto& [host, relay] : relayed_by) {
    if (relay == "sim1") carried_by_sim1.insert(host);
  }
  CHECK(carried_by_sim1.size() == 3);
  auto lost = events_named(events, "host.lost");
  REQUIRE(lost.size() == 1);
  CHECK(lost[0]["host"] == "sim1");
  std::set<std::string> reattached;
  for (const auto& event : events_named(events, "host.reattached")) {
    reattached.insert(event["host"].get<std::string>());
    CHECK(event["from"] == "sim1");
    CHECK(event["workers"] == 2);
  }
  CHECK(reattached == carried_by_sim1);
  // The spare took sim1's two ranks; nobody else's changed host.
  auto generations = events_named(events, "plan.generation");
  REQUIRE(generations.size() == 2);
  CHECK(generations.back()["world_size"] == 24);
  CHECK(sim.cluster.silence_fences() == 0);
}

TEST_CASE("a simulated relay tree: the relayed hosts' beats and pongs come in relay_batch frames, and a batch for another relay's host is refused") {
  SimRun sim;
  sim.seams.relay_over_transport = true;
  // 12 hosts, fanout 3: four relays (sim1 the first) carrying three hosts each (relay_tree.cpp).
  std::string spec = sim_spec(12, 2, "scale: {tree: on, fanout: 3}\n");
  std::string carried_elsewhere;
  CHECK(sim.run(spec, [&](sim::FakeCluster& cluster, const std::atomic<bool>& ended) {
    int64_t step = cluster.newest_step();
    // sim1 speaks for a host another relay carries.
    for (const auto& connected : events_named(sim.events(), "host.connected")) {
      std::string relay = connected.value("relayed_by", "");
      if (!relay.empty() && relay != "sim1") carried_elsewhere = connected["host"].get<std::string>();
    }
    REQUIRE_FALSE(carried_elsewhere.empty());
    cluster.forge_relayed_pong("sim1", carried_elsewhere);
    wait_until([&] { return ended.load() || cluster.newest_step() >= step + 3; }, 20000);
  }) == 0);
  // Batched: fewer frames than the beats and pongs they carried (9 relayed hosts, a beat every
  // 100 ms each, held up to 100 ms).
  CHECK(sim.cluster.relay_batches() > 0);
  CHECK(sim.cluster.relay_batched_messages() > 2 * sim.cluster.relay_batches());
  auto events = sim.events();
  CHECK(events_named(events, "host.lost").empty());
  CHECK(events_named(events, "protocol.error").empty());
  auto refused = events_named(events, "agent.error");
  REQUIRE(refused.size() == 1);
  CHECK(refused[0]["host"] == "sim1");
  CHECK(refused[0]["message"] == "relay_batch for '" + carried_elsewhere + "', a host this agent does not relay");
  CHECK(sim.cluster.silence_fences() == 0);
}
