// A hybrid job on the namespace cluster (issue 13): 2 hosts x 4 slots, tensor 2 x pipeline 2 x
// data 2, loses a host. Ranks are TP fastest, then DP, then PP, so the lost host held pipeline
// stage 1 of both replicas. With a spare, the spare takes over exactly those (tp, pp, dp)
// positions and the run ends bit for bit where a fault-free run ends; without one, the plan
// shrinks to data 1 on the host left (the global batch kept by accumulation), every shard is
// still in the checkpoint, and the run ends within 1e-4 of the fault-free loss. Stopped and
// resumed at the same layout, every rank ends bit-identical. Nothing of a run is left anywhere.

#include <doctest/doctest.h>

#include <signal.h>

#include <cmath>

#include "tests/integration/cluster_job.h"

using namespace dtrain::testing;

namespace {

constexpr int kSteps = 200;
const char* kLayout = "parallelism: {tensor: 2, pipeline: 2}\nbatch: {global: 32, micro: 4}\n";

std::string command(int steps) {
  return "[dtrain-train, --layers, \"3\", --steps, \"" + std::to_string(steps) + "\", --log-every, \"50\"]";
}

ClusterSpec hybrid_job(const std::string& name) {
  ClusterSpec spec;
  spec.name = name;
  spec.hosts = {1, 2};
  spec.slots = 4;
  spec.command = command(kSteps);
  spec.extra = std::string(kLayout) + "elastic: {min_hosts: 1, max_restarts: 1}\n";
  return spec;
}

/// Every rank's final line of a fault-free run of the same layout (8 slots on this machine:
/// the same plan, so rank r has the same coordinates as on the cluster).
std::vector<std::string> fault_free_finals() {
  static std::vector<std::string> finals = [] {
    DtrainEnv env;
    std::string yaml = "version: 1\nname: reference\nslots_per_host: 8\nworker:\n  command: " + command(kSteps) +
                       "\n  backend: gloo\n" + kLayout;
    DtrainProcess run = env.run({"submit", env.write_spec("reference.yaml", yaml)}, 120'000);
    std::vector<std::string> lines;
    if (run.exit_code != 0 || env.run_dirs().size() != 1) return lines;
    for (int rank = 0; rank < 8; ++rank) {
      lines.push_back(final_line(read_text(env.run_dirs()[0] + "/ranks/" + std::to_string(rank) + ".log")));
    }
    return lines;
  }();
  return finals;
}

/// Runs `spec` (checkpoint every 50 steps), kills host 2 once step 50 is committed, and waits
/// for the run to end; it must succeed.
void run_losing_host_2(const TestCluster& cluster, ClusterJob& job, const ClusterSpec& spec) {
  job.write_spec(spec, 50);
  job.start();
  REQUIRE(job.wait_exec());
  REQUIRE(job.wait_checkpoint(50, 90000));
  REQUIRE(cluster.kill(2).status == 0);
  REQUIRE(job.wait(120000));
  INFO(job.err());
  CHECK(job.exit_code() == 0);
}

int last_generation(ClusterJob& job) {
  auto plans = job.events("plan.generation");
  return plans.empty() ? -1 : plans.back().value("gen", -1);
}

/// (dp, pp, tp) of every rank in a plan document, by rank.
std::vector<std::string> coordinates(const nlohmann::json& plan) {
  std::vector<std::string> out;
  for (const auto& rank : plan["ranks"]) {
    out.push_back(std::to_string(rank["dp"].get<int>()) + "," + std::to_string(rank["pp"].get<int>()) + "," +
                  std::to_string(rank["tp"].get<int>()));
  }
  return out;
}

}  // namespace

TEST_CASE("hybrid cluster: a lost host's (tp, pp) positions go to the spare and the run ends bit for bit") {
  TestCluster cluster(3);
  DTRAIN_REQUIRE_CLUSTER(cluster);
  std::vector<std::string> expected = fault_free_finals();
  REQUIRE(expected.size() == 8);
  ClusterJob job(cluster, "hyspare");
  ClusterSpec spec = hybrid_job("hyspare");
  spec.spares = {3};
  run_losing_host_2(cluster, job, spec);

  int gen = last_generation(job);
  REQUIRE(gen >= 1);
  nlohmann::json before = job.plan(0), after = job.plan(gen);
  CHECK(after["world_size"] == 8);
  CHECK(after["data"] == 2);
  REQUIRE(after["hosts"].size() == 2);
  CHECK(after["hosts"][1]["name"] == cluster.host(3).name);
  CHECK(coordinates(after) == coordinates(before));
  for (int rank : after["hosts"][1]["ranks"]) {
    CAPTURE(rank);
    CHECK(before["ranks"][rank]["host"] == cluster.host(2).name);  // the spare runs what h2 ran
    CHECK(before["ranks"][rank]["pp"] == 1);                        // stage 1 of both replicas
  }
  auto changed = job.events("plan.changed");
  REQUIRE(!changed.empty());
  MESSAGE("plan.changed: " << changed.back().dump());
  CHECK(changed.back()["diff"].get<std::string>().find(cluster.host(3).name) != std::string::npos);
  for (int rank = 0; rank < 8; ++rank) {
    CAPTURE(rank);
    CHECK(job.rank_log(rank).find("resumed from checkpoint step-") != std::string::npos);
    CHECK(final_line(job.rank_log(rank)) == expected[static_cast<size_t>(rank)]);
  }
  check_nothing_left(cluster, job);
}

TEST_CASE("hybrid cluster: without a spare the job shrinks to data 1 with the global batch kept, within 1e-4") {
  TestCluster cluster(2);
  DTRAIN_REQUIRE_CLUSTER(cluster);
  std::vector<std::string> expected = fault_free_finals();
  REQUIRE(expected.size() == 8);
  ClusterJob job(cluster, "hyshrink");
  run_losing_host_2(cluster, job, hybrid_job("hyshrink"));

  int gen = last_generation(job);
  REQUIRE(gen >= 1);
  nlohmann::json after = job.plan(gen);
  CHECK(after["world_size"] == 4);
  CHECK(after["tensor"] == 2);
  CHECK(after["pipeline"] == 2);
  CHECK(after["data"] == 1);
  CHECK(after["global_batch"] == 32);
  CHECK(after["grad_accum"] == 8);
  double reference = final_loss(expected[0]);
  for (int rank = 0; rank < 4; ++rank) {
    CAPTURE(rank);
    std::string log = job.rank_log(rank);
    CHECK(log.find("resumed from checkpoint step-") != std::string::npos);
    double loss = final_loss(final_line(log));
    REQUIRE(!std::isnan(loss));
    MESSAGE("rank " << rank << " after the shrink: loss " << loss << ", fault-free " << reference
                    << ", relative difference " << std::fabs(loss - reference) / reference);
    CHECK(std::fabs(loss - reference) <= 1e-4 * reference);
  }
  check_nothing_left(cluster, job);
}

TEST_CASE("hybrid cluster: stopped at a checkpoint and resumed at the same layout, every rank ends bit-identical") {
  TestCluster cluster(2);
  DTRAIN_REQUIRE_CLUSTER(cluster);
  std::vector<std::string> expected = fault_free_finals();
  REQUIRE(expected.size() == 8);
  ClusterJob job(cluster, "hystop");
  ClusterSpec first = hybrid_job("hystop");
  first.command = command(120);  // stops after its step-100 checkpoint
  job.write_spec(first, 50);
  REQUIRE(job.run({}, 120000));
  INFO(job.err());
  REQUIRE(job.exit_code() == 0);
  check_nothing_left(cluster, job);

  ClusterJob resumed(cluster, "hystop2");
  ClusterSpec second = hybrid_job("hystop2");
  second.extra += "checkpoint: {dir: " + job.checkpoint_dir() + ", interval_steps: 50, keep: 3}\n";
  resumed.write_spec(second);
  REQUIRE(resumed.run({}, 120000));
  INFO(resumed.err());
  CHECK(resumed.exit_code() == 0);
  for (int rank = 0; rank < 8; ++rank) {
    CAPTURE(rank);
    CHECK(resumed.rank_log(rank).find("resumed from checkpoint step-100") != std::string::npos);
    CHECK(final_line(resumed.rank_log(rank)) == expected[static_cast<size_t>(rank)]);
  }
  check_nothing_left(cluster, resumed);
}
