// Elastic supervision on the namespace cluster (issue 5): a host killed outright is dropped and
// the job shrinks with its global batch kept, or a spare takes its place; a partitioned host is
// detected within heartbeat.timeout + one interval while its own agent fences its workers; and
// when too few hosts remain the run fails clearly with exit code 5. Training resumes from the
// shared checkpoints and ends at the loss of a fault-free run. After each scenario no process of
// the run remains on any host.

#include <doctest/doctest.h>

#include <signal.h>

#include <cmath>

#include "tests/integration/cluster_job.h"

using namespace dtrain::testing;

namespace {

constexpr int kSteps = 300;

ClusterSpec trainer_job(const std::string& name) { return shrinkable_trainer_job(name, kSteps); }

void check_final_loss(ClusterJob& job, int world_size) { check_shrinkable_final_loss(job, world_size, kSteps); }

void report_recovery(ClusterJob& job) {
  for (const auto& event : job.events("recovery.completed")) MESSAGE("recovery.completed " << event.dump());
}

/// The generation that started after the host loss (the last plan.generation).
int last_generation(ClusterJob& job) {
  auto plans = job.events("plan.generation");
  return plans.empty() ? -1 : plans.back().value("gen", -1);
}

}  // namespace

TEST_CASE("host killed without a spare: shrink to 2 hosts with the global batch kept and the same loss") {
  TestCluster cluster(3);
  DTRAIN_REQUIRE_CLUSTER(cluster);
  ClusterJob job(cluster, "shrink");
  job.write_spec(trainer_job("shrink"), 50);
  job.start();
  REQUIRE(job.wait_exec());
  REQUIRE(job.wait_checkpoint(100, 90000));
  REQUIRE(cluster.kill(3).status == 0);
  REQUIRE(job.wait(120000));
  INFO(job.err());
  CHECK(job.exit_code() == 0);

  auto lost = job.events("host.lost");
  REQUIRE(!lost.empty());
  CHECK(lost[0]["host"] == cluster.host(3).name);
  int gen = last_generation(job);
  REQUIRE(gen >= 1);
  nlohmann::json before = job.plan(0);
  nlohmann::json after = job.plan(gen);
  CHECK(before["data"] == 6);
  CHECK(before["grad_accum"] == 2);
  CHECK(after["world_size"] == 4);
  CHECK(after["data"] == 4);
  CHECK(after["grad_accum"] == 3);
  CHECK(after["global_batch"] == 24);
  CHECK(after["hosts"].size() == 2);
  CHECK(after.dump().find(cluster.host(3).name + "\"") != std::string::npos);  // listed in "without"
  CHECK(job.events("plan.changed").size() >= 1);
  auto completed = job.events("recovery.completed");
  REQUIRE(!completed.empty());
  CHECK(completed.back()["resume_step"].get<int>() >= 100);
  CHECK(completed.back()["world_size"] == 4);
  CHECK(job.rank_log(0).find("resumed from checkpoint") != std::string::npos);
  check_final_loss(job, 4);
  report_recovery(job);
  check_nothing_left(cluster, job);
}

TEST_CASE("host killed with a spare listed: replaced by the spare at the same world size and loss") {
  TestCluster cluster(4);
  DTRAIN_REQUIRE_CLUSTER(cluster);
  ClusterJob job(cluster, "spare");
  ClusterSpec spec = trainer_job("spare");
  spec.spares = {4};
  job.write_spec(spec, 50);
  job.start();
  REQUIRE(job.wait_exec());
  REQUIRE(job.wait_checkpoint(100, 90000));
  REQUIRE(cluster.kill(3).status == 0);
  REQUIRE(job.wait(120000));
  INFO(job.err());
  CHECK(job.exit_code() == 0);

  int gen = last_generation(job);
  REQUIRE(gen >= 1);
  nlohmann::json after = job.plan(gen);
  CHECK(after["world_size"] == 6);
  CHECK(after["grad_accum"] == 2);
  REQUIRE(after["hosts"].size() == 3);
  CHECK(after["hosts"][2]["name"] == cluster.host(4).name);
  CHECK(after["spares_used"].dump().find(cluster.host(4).name) != std::string::npos);
  // The spare really ran ranks 4 and 5.
  nlohmann::json state = nlohmann::json::parse(read_text(job.run_dir() + "/state.json"));
  CHECK(state["world_size"] == 6);
  CHECK(state["ranks"][4]["host"] == cluster.host(4).name);
  CHECK(job.rank_log(4).find("resumed from checkpoint") != std::string::npos);
  check_final_loss(job, 6);
  report_recovery(job);
  check_nothing_left(cluster, job);
}

TEST_CASE("host killed with a spare and elastic.in_place: only its ranks start on the spare, the others keep running") {
  TestCluster cluster(4);
  DTRAIN_REQUIRE_CLUSTER(cluster);
  ClusterJob job(cluster, "inplace");
  ClusterSpec spec = trainer_job("inplace");
  spec.spares = {4};
  spec.extra = "batch: {global: 24, micro: 2}\nelastic: {min_hosts: 2, max_restarts: 1, in_place: true}\n";
  job.write_spec(spec, 50);
  job.start();
  REQUIRE(job.wait_exec());
  REQUIRE(job.wait_checkpoint(100, 90000));
  REQUIRE(cluster.kill(3).status == 0);
  REQUIRE(job.wait(120000));
  INFO(job.err());
  CHECK(job.exit_code() == 0);

  auto completed = job.events("recovery.completed");
  REQUIRE(completed.size() == 1);
  CHECK(completed[0]["kind"] == "host.lost");
  CHECK(completed[0]["action"] == "in-place");
  CHECK(completed[0]["steps_lost"] == 0);
  CHECK(job.events("recovery.fallback").empty());
  // Hosts 1 and 2 carried their ranks 0-3 over; only ranks 4 and 5 started again, on the spare.
  int carried = 0;
  for (const auto& event : job.events("recovery.carried_over")) carried += static_cast<int>(event["ranks"].size());
  CHECK(carried == 4);
  auto started = job.events("worker.started");
  REQUIRE(started.size() == 8);
  for (size_t i = 6; i < started.size(); ++i) CHECK(started[i]["host"] == cluster.host(4).name);
  nlohmann::json after = job.plan(1);
  CHECK(after["world_size"] == 6);
  CHECK(after["hosts"][2]["name"] == cluster.host(4).name);
  CHECK(job.rank_log(4).find("rejoined generation 1") != std::string::npos);
  check_final_loss(job, 6);
  report_recovery(job);
  check_nothing_left(cluster, job);
}

TEST_CASE("partitioned host: detected within timeout + interval - its agent fences - clean after heal") {
  TestCluster cluster(3);
  DTRAIN_REQUIRE_CLUSTER(cluster);
  ClusterJob job(cluster, "part");
  job.write_spec(trainer_job("part"), 50);
  job.start();
  REQUIRE(job.wait_exec());
  REQUIRE(job.wait_checkpoint(50, 90000));
  REQUIRE(cluster.partition(2).status == 0);
  int64_t partitioned_at = now_ms();

  // The supervisor's own measure: the silence it saw before declaring the host lost.
  REQUIRE(wait_until([&] { return !job.events("host.lost").empty(); }, 10000));
  nlohmann::json lost = job.events("host.lost")[0];
  INFO(lost.dump());
  CHECK(lost["host"] == cluster.host(2).name);
  REQUIRE(lost.contains("silent_ms"));
  CHECK(lost["silent_ms"].get<int64_t>() > 2000);
  CHECK(lost["silent_ms"].get<int64_t>() <= 2000 + 200);
  MESSAGE("partition detected after " << lost["silent_ms"] << " ms of silence");

  // Cut off, h2's agent hears nothing either: it fences (heartbeat.timeout, then TERM, grace,
  // KILL). Only sshd's session, stuck on the dead TCP connection, may stay until heal.
  std::string left = wait_only_sshd_left(cluster, 2, 2000 + 2000 + 3000);
  CHECK_MESSAGE(left.empty(), "still on the partitioned host:\n" << left);
  MESSAGE("partitioned host free of the run's processes " << now_ms() - partitioned_at << " ms after the cut");

  REQUIRE(cluster.heal(2).status == 0);
  REQUIRE(job.wait(120000));
  INFO(job.err());
  CHECK(job.exit_code() == 0);
  CHECK(job.plan(last_generation(job))["world_size"] == 4);
  check_final_loss(job, 4);
  report_recovery(job);
  // After heal the stale session learns the connection is gone and ends too.
  check_nothing_left(cluster, job, 30000);
}

TEST_CASE("a worker stopped on a remote host: sampled there by its agent, recovered with a rendezvous phase") {
  TestCluster cluster(2);
  DTRAIN_REQUIRE_CLUSTER(cluster);
  ClusterJob job(cluster, "rhang");
  ClusterSpec spec = trainer_job("rhang");
  spec.hosts = {1, 2};
  spec.extra = "batch: {global: 24, micro: 2}\nelastic: {max_restarts: 1}\n";
  job.write_spec(spec, 50);
  job.start();
  REQUIRE(job.wait_exec());
  REQUIRE(job.wait_checkpoint(50, 90000));
  nlohmann::json state = nlohmann::json::parse(read_text(job.run_dir() + "/state.json"));
  REQUIRE(state["ranks"][3]["host"] == cluster.host(2).name);
  int victim = state["ranks"][3]["pid"].get<int>();
  REQUIRE(victim > 0);
  REQUIRE(::kill(victim, SIGSTOP) == 0);  // the hosts share this pid namespace
  REQUIRE(job.wait(120000));
  INFO(job.err());
  CHECK(job.exit_code() == 0);

  auto hangs = job.events("worker.hang");
  REQUIRE(hangs.size() == 1);
  CHECK(hangs[0]["rank"] == 3);
  auto samples = job.events("worker.sample");
  REQUIRE(samples.size() == 1);
  INFO(samples[0].dump());
  CHECK(samples[0]["host"] == cluster.host(2).name);
  REQUIRE(samples[0].contains("path"));
  std::string sample = read_text(samples[0]["path"].get<std::string>());
  CHECK(sample.find("State:\tT") != std::string::npos);
  CHECK(sample.find("== kernel stack") != std::string::npos);
  auto completed = job.events("recovery.completed");
  REQUIRE(completed.size() == 1);
  CHECK(completed[0]["phases"].contains("rendezvous_ms"));
  CHECK(completed[0]["cause"]["kind"] == "worker.hang");
  report_recovery(job);
  check_nothing_left(cluster, job);
}

TEST_CASE("fewer hosts than elastic.min_hosts: the run fails with exit code 5 and says why") {
  TestCluster cluster(2);
  DTRAIN_REQUIRE_CLUSTER(cluster);
  ClusterJob job(cluster, "minh");
  ClusterSpec spec;
  spec.name = "minh";
  spec.hosts = {1, 2};
  spec.slots = 1;
  spec.command = "[/bin/sh, -c, 'exec sleep 120']";
  spec.extra = "elastic: {min_hosts: 2, max_restarts: 3}\n";
  job.write_spec(spec);
  job.start();
  REQUIRE(job.wait_exec());
  REQUIRE(job.wait_running(0, 30000));
  REQUIRE(cluster.kill(2).status == 0);
  REQUIRE(job.wait(30000));
  std::string err = job.err();
  INFO(err);
  CHECK(job.exit_code() == 5);
  CHECK(err.find(cluster.host(2).name) != std::string::npos);
  CHECK(err.find("elastic.min_hosts=2") != std::string::npos);
  CHECK(job.events("failure.unrecoverable").size() == 1);
  nlohmann::json state = nlohmann::json::parse(read_text(job.run_dir() + "/state.json"));
  CHECK(state["exit_code"] == 5);
  CHECK(state["root_cause"]["host"] == cluster.host(2).name);
  check_nothing_left(cluster, job);
}
