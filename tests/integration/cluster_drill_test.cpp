// Host-level drills on the namespace cluster (issue 6), run by `dtrain drill` from the control
// namespace exactly as an operator on the launch node would: kill-host of one host of 3 (the
// agent and its workers SIGKILLed over SSH) is graded a pass, the job shrinks to the two hosts
// left and finishes, and nothing of the run is left on any host; partition-host through the
// test cluster's switch port (the drill's --cut-command/--heal-command) is graded a pass, with
// the healed host proven free of the run's processes.

#include <doctest/doctest.h>

#include "tests/integration/cluster_job.h"

using namespace dtrain::testing;
using nlohmann::json;

namespace {

constexpr int kSteps = 400;

// batch 24 = micro 2 × data 6 × accum 2 on 3 hosts × 2 slots; 2 hosts → data 4, accum 3.
ClusterSpec trainer_job(const std::string& name) {
  ClusterSpec spec;
  spec.name = name;
  spec.command = trainer_command(kSteps);
  spec.extra = "batch: {global: 24, micro: 2}\nelastic: {min_hosts: 2, max_restarts: 1}\n";
  return spec;
}

/// `dtrain ARGS...` in the control namespace with the job's DTRAIN_HOME; output is stdout and
/// stderr together (the verdict is read back from the run log).
CommandOutput dtrain_in_ctl(const TestCluster& cluster, ClusterJob& job, const std::vector<std::string>& args) {
  std::vector<std::string> argv{std::string(DTRAIN_SOURCE_DIR) + "/scripts/testcluster.sh", "exec", "ctl", DTRAIN_EXE};
  argv.insert(argv.end(), args.begin(), args.end());
  return run_command(argv, {{"DTRAIN_HOME", job.dir() + "/home"}, {"DTRAIN_TESTCLUSTER_PREFIX", cluster.prefix()}});
}

json only_verdict(ClusterJob& job) {
  auto verdicts = job.events("drill.verdict");
  REQUIRE(verdicts.size() == 1);
  REQUIRE(verdicts[0]["faults"].size() == 1);
  return verdicts[0];
}

bool check_met(const json& fault, const std::string& name) {
  for (const json& check : fault["checks"]) {
    if (check["name"] == name) return check["met"] == true;
  }
  return false;
}

void start_and_train(ClusterJob& job) {
  job.start();
  REQUIRE(job.wait_exec());
  REQUIRE(job.wait_checkpoint(50, 90000));
}

void finish_clean(const TestCluster& cluster, ClusterJob& job) {
  REQUIRE(job.wait(120000));
  INFO(job.err());
  CHECK(job.exit_code() == 0);
  auto plans = job.events("plan.generation");
  REQUIRE(!plans.empty());
  CHECK(plans.back()["world_size"] == 4);
  std::string left = leftovers(cluster, job.run_id(), 30000);
  CHECK_MESSAGE(left.empty(), "left behind by run " << job.run_id() << ":\n" << left);
}

}  // namespace

TEST_CASE("kill-host drill: one host of 3 killed over SSH, shrunk, graded a pass, nothing left anywhere") {
  TestCluster cluster(3);
  DTRAIN_REQUIRE_CLUSTER(cluster);
  ClusterJob job(cluster, "dkill");
  job.write_spec(trainer_job("dkill"), 50);
  start_and_train(job);
  std::string victim = cluster.host(3).name;

  CommandOutput drill = dtrain_in_ctl(cluster, job, {"drill", job.run_id(), "--fault", "kill-host:" + victim,
                                                     "--detect", "10s", "--recover", "60s", "--max-lost-steps", "100"});
  INFO(drill.output);
  CHECK(drill.status == 0);
  json verdict = only_verdict(job);
  json fault = verdict["faults"][0];
  MESSAGE("kill-host: detected_by=" << fault["detected_by"] << " detect_ms=" << fault["detect_ms"]
                                    << " recover_ms=" << fault["recover_ms"] << " steps_lost=" << fault["steps_lost"]
                                    << " phases=" << fault["phases"].dump());
  CHECK(verdict["verdict"] == "pass");
  CHECK(fault["verdict"] == "pass");
  CHECK(check_met(fault, "host lost"));
  CHECK(check_met(fault, "host left out of the new generation"));
  CHECK(check_met(fault, "nothing left on " + victim));
  CHECK(fault["resources_released"] == true);
  auto injected = job.events("drill.injected");
  REQUIRE(injected.size() == 1);
  CHECK(injected[0]["method"] == "ssh");
  // Killed, not cut off: the host's sshd still answers.
  CHECK(cluster.ssh(3, "true").status == 0);
  finish_clean(cluster, job);
}

TEST_CASE("partition-host drill through the switch port: graded a pass, the healed host holds nothing of the run") {
  TestCluster cluster(3);
  DTRAIN_REQUIRE_CLUSTER(cluster);
  ClusterJob job(cluster, "dpart");
  job.write_spec(trainer_job("dpart"), 50);
  start_and_train(job);
  std::string victim = cluster.host(2).name;
  std::string script = "DTRAIN_TESTCLUSTER_PREFIX=" + cluster.prefix() + " " + DTRAIN_SOURCE_DIR + "/scripts/testcluster.sh";

  CommandOutput drill = dtrain_in_ctl(cluster, job, {"drill", job.run_id(), "--fault", "partition-host:" + victim,
                                                     "--cut-command", script + " partition {host}",
                                                     "--heal-command", script + " heal {host}",
                                                     "--detect", "10s", "--recover", "60s"});
  INFO(drill.output);
  CHECK(drill.status == 0);
  json verdict = only_verdict(job);
  json fault = verdict["faults"][0];
  MESSAGE("partition-host: detected_by=" << fault["detected_by"] << " detect_ms=" << fault["detect_ms"]
                                         << " recover_ms=" << fault["recover_ms"] << " steps_lost="
                                         << fault["steps_lost"] << " phases=" << fault["phases"].dump());
  CHECK(verdict["verdict"] == "pass");
  CHECK(check_met(fault, "host lost"));
  CHECK(check_met(fault, "healed"));
  CHECK(check_met(fault, "nothing left on " + victim));
  // Detection needs heartbeat.timeout (2s) of silence: a cut is not seen at once.
  CHECK(fault["detect_ms"].get<int64_t>() >= 1500);
  auto injected = job.events("drill.injected");
  REQUIRE(injected.size() == 1);
  CHECK(injected[0]["method"] == "commands");
  CHECK(cluster.ssh(2, "true").status == 0);  // healed
  finish_clean(cluster, job);
}
