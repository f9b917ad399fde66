// Host-level drills on the namespace cluster (issue 6), run by `dtrain drill` from the control
// namespace exactly as an operator on the launch node would: kill-host of one host of 3 (the
// agent and its workers SIGKILLed over SSH) is graded a pass, the job shrinks to the two hosts
// left and finishes, and nothing of the run is left on any host; partition-host through the
// test cluster's switch port (the drill's --cut-command/--heal-command) is graded a pass, with
// the healed host proven free of the run's processes; partition-host through the opt-in
// firewall (nft rules that the host adds and deletes by itself, inside its own network
// namespace only) is graded a pass with the same proofs; kill-supervisor on a 2-host job: the
// remote agents fence, `dtrain resume` finishes the run, and nothing of the run is left.

#include <doctest/doctest.h>

#include <future>

#include "tests/integration/cluster_job.h"
#include "tests/skip.h"

using namespace dtrain::testing;
using nlohmann::json;

namespace {

// Long enough that the drill (started once a checkpoint is committed, then waiting for two more
// steps in state.json) always finds the run still training on an idle machine: at 400 steps the
// run once ended first.
constexpr int kSteps = 2000;

ClusterSpec trainer_job(const std::string& name) { return shrinkable_trainer_job(name, kSteps); }

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
  check_nothing_left(cluster, job, 30000);
}

/// Whether nft is installed (the cluster's hosts share this machine's file system). Without it
/// the firewall drill cannot run on the test cluster: the caller skips with this reason.
std::string nft_missing() {
  if (run_command({"/bin/sh", "-c", "command -v nft"}).status == 0) return "";
  return "no `nft` on this machine (Debian package nftables; scripts/setup.sh installs it)";
}

/// `nft list ruleset` as seen on `where` (a host, or "ctl"): that namespace's rules only.
std::string ruleset_on(const TestCluster& cluster, const std::string& where) {
  CommandOutput listed = cluster.exec(where, {"nft", "list", "ruleset"});
  REQUIRE_MESSAGE(listed.status == 0, "nft list ruleset on " << where << ": " << listed.output);
  return listed.output;
}

bool has_drill_table(const std::string& ruleset) { return ruleset.find("dtrain_drill_") != std::string::npos; }

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
  std::string script = "DTRAIN_TESTCLUSTER_PREFIX=" + cluster.prefix() + " " +
                       dtrain::shell_quote(std::string(DTRAIN_SOURCE_DIR) + "/scripts/testcluster.sh");

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

TEST_CASE("partition-host drill through the firewall: nft rules only in the host's namespace, gone by themselves, a pass") {
  if (std::string missing = nft_missing(); !missing.empty()) dtrain::testing::skip_test(missing);
  TestCluster cluster(3);
  DTRAIN_REQUIRE_CLUSTER(cluster);
  ClusterJob job(cluster, "dfwall");
  job.write_spec(trainer_job("dfwall"), 50);
  start_and_train(job);
  std::string victim = cluster.host(2).name;
  REQUIRE_FALSE(has_drill_table(ruleset_on(cluster, victim)));

  // The drill blocks until the host has healed itself; watch the host's rules meanwhile.
  std::future<CommandOutput> running = std::async(std::launch::async, [&] {
    return dtrain_in_ctl(cluster, job, {"drill", job.run_id(), "--fault", "partition-host:" + victim,
                                        "--allow-firewall", "--partition-duration", "12s", "--detect", "10s",
                                        "--recover", "60s"});
  });
  bool seen_cut = wait_until([&] { return has_drill_table(ruleset_on(cluster, victim)); }, 30000);
  std::string victim_rules = ruleset_on(cluster, victim);
  // nft works on the namespace it runs in: neither another host nor the launch node got rules.
  bool elsewhere = has_drill_table(ruleset_on(cluster, cluster.host(1).name)) ||
                   has_drill_table(ruleset_on(cluster, "ctl"));
  CommandOutput drill = running.get();
  INFO(drill.output);
  CHECK_MESSAGE(seen_cut, "no dtrain_drill_ table ever appeared on " << victim);
  if (seen_cut) {
    CHECK(victim_rules.find("ip saddr " + cluster.value("DTRAIN_TESTCLUSTER_CONTROL_IP") + " drop") != std::string::npos);
    CHECK(victim_rules.find("ip daddr " + cluster.value("DTRAIN_TESTCLUSTER_CONTROL_IP") + " drop") != std::string::npos);
  }
  CHECK_FALSE(elsewhere);
  CHECK(drill.status == 0);
  json verdict = only_verdict(job);
  json fault = verdict["faults"][0];
  MESSAGE("partition-host (firewall): detected_by=" << fault["detected_by"] << " detect_ms=" << fault["detect_ms"]
                                                    << " recover_ms=" << fault["recover_ms"] << " steps_lost="
                                                    << fault["steps_lost"] << " phases=" << fault["phases"].dump());
  CHECK(verdict["verdict"] == "pass");
  CHECK(check_met(fault, "host lost"));
  CHECK(check_met(fault, "host left out of the new generation"));
  CHECK(check_met(fault, "healed"));
  CHECK(check_met(fault, "nothing left on " + victim));
  CHECK(fault["detect_ms"].get<int64_t>() >= 1500);
  auto injected = job.events("drill.injected");
  REQUIRE(injected.size() == 1);
  CHECK(injected[0]["method"] == "firewall");
  CHECK(injected[0]["duration_ms"] == 12000);
  // Healed by itself: reachable again, and no table or rule of the drill is left there.
  CHECK(cluster.ssh(2, "true").status == 0);
  CHECK_FALSE(has_drill_table(ruleset_on(cluster, victim)));
  // The helper's stamp of the cut was read back and removed: no file of the drill either.
  CommandOutput files = cluster.exec(victim, {"/bin/sh", "-c", "ls /tmp | grep dtrain_drill_ || true"});
  CHECK_MESSAGE(std::string(dtrain::trim(files.output)).empty(), "left in " << victim << ":/tmp: " << files.output);
  finish_clean(cluster, job);
}

TEST_CASE("kill-supervisor drill on 2 hosts: the remote agents fence, dtrain resume finishes the run, nothing left") {
  TestCluster cluster(2);
  DTRAIN_REQUIRE_CLUSTER(cluster);
  ClusterJob job(cluster, "dfwsup");
  ClusterSpec spec;
  spec.name = "dfwsup";
  spec.hosts = {1, 2};
  spec.command = trainer_command(kSteps);
  spec.extra = "batch: {global: 16, micro: 2}\n";
  job.write_spec(spec, 50);
  start_and_train(job);
  int64_t killed_supervisor = job.pid();

  CommandOutput drill = dtrain_in_ctl(cluster, job, {"drill", job.run_id(), "--fault", "kill-supervisor", "--detect",
                                                     "10s", "--recover", "60s", "--max-lost-steps", "100"});
  INFO(drill.output);
  CHECK(drill.status == 0);
  // The supervisor this test started died of SIGKILL.
  REQUIRE(job.wait(10000));
  CHECK(job.exit_code() == 128 + SIGKILL);
  json verdict = only_verdict(job);
  json fault = verdict["faults"][0];
  MESSAGE("kill-supervisor (2 hosts): detect_ms=" << fault["detect_ms"] << " recover_ms=" << fault["recover_ms"]
                                                  << " steps_lost=" << fault["steps_lost"]
                                                  << " phases=" << fault["phases"].dump());
  CHECK(verdict["verdict"] == "pass");
  CHECK(fault["detected_by"] == "agents fenced");
  CHECK(check_met(fault, "agents fenced"));
  CHECK(check_met(fault, "dtrain resume started"));
  auto injected = job.events("drill.injected");
  REQUIRE(injected.size() == 1);
  CHECK(injected[0]["pid"] == killed_supervisor);
  int killed_generation = injected[0]["gen"].get<int>();

  // Every agent and worker of the killed supervisor's generation is gone from its host, seen
  // from the host itself.
  for (int number : {1, 2}) {
    std::string old;
    for (const json& started : job.events("worker.started")) {
      if (started["host"] == cluster.host(number).name && started["gen"] == killed_generation) {
        old += " " + std::to_string(started["pid"].get<int>());
      }
    }
    REQUIRE_FALSE(old.empty());
    CommandOutput alive = cluster.exec(std::to_string(number),
                                       {"/bin/sh", "-c", "for p in" + old + "; do kill -0 $p 2>/dev/null && echo $p; done; true"});
    CHECK_MESSAGE(std::string(dtrain::trim(alive.output)).empty(),
                  "old workers still alive on " << cluster.host(number).name << ": " << alive.output);
  }

  // The resumed supervisor runs detached: follow its run log to the end.
  bool finished = wait_until([&] { return !job.events("run.finished").empty(); }, 120000);
  REQUIRE_MESSAGE(finished, "the resumed run did not finish");
  CHECK(job.events("run.finished")[0]["state"] == "succeeded");
  auto resumed = job.events("run.resumed");
  REQUIRE(resumed.size() == 1);
  CHECK(resumed[0]["previous_supervisor_pid"] == killed_supervisor);
  check_nothing_left(cluster, job, 30000);
}
