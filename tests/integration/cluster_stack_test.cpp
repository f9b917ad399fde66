// One software stack (issue 29 item 4) on the namespace cluster: each host's agent fingerprints
// what it would run the worker with, and the supervisor compares the hosts before the first
// generation. Hosts share the file system but each has its own /tmp, so a fake site-packages
// (torch-9.9.9.dist-info) or another copy of the script under one host's /tmp makes that host
// differ, exactly as another image would. strict refuses (exit 3) naming the host with both
// values side by side, warn starts and finishes with the difference in the run log, and a spare
// that differs is left out: when a host is lost the run shrinks instead of taking it. After each
// run nothing of it is left on any host.

#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>

#include "tests/integration/cluster_job.h"

using namespace dtrain::testing;

namespace {

// The system torch of /usr/bin/python3 (Debian's python3-torch) is what the other hosts report.
constexpr const char* kSite = "/tmp/dtrain-stack-site";
constexpr const char* kScript = "/tmp/dtrain-stack-train.py";

/// Writes `text` at `path` as host `number` sees it (under its private /tmp).
void write_on_host(const TestCluster& cluster, int number, const std::string& path, const std::string& text) {
  std::string real = cluster.host(number).dir + path;
  std::filesystem::create_directories(std::filesystem::path(real).parent_path());
  std::ofstream(real) << text;
}

/// A fake site-packages on host `number` whose torch is 9.9.9 (nothing importable: the probe
/// reads versions from sys.path's dist-info names without importing anything).
void fake_torch_on(const TestCluster& cluster, int number) {
  write_on_host(cluster, number, std::string(kSite) + "/torch-9.9.9.dist-info/METADATA", "Name: torch\nVersion: 9.9.9\n");
}

/// A worker that does nothing distributed: it prints and exits 0. In generation 0 it waits
/// `first_generation_s` first (time to lose a host).
std::string script(int first_generation_s = 0) {
  return "import os, sys, time\n"
         "if os.environ.get('DTRAIN_GENERATION') == '0': time.sleep(" + std::to_string(first_generation_s) + ")\n"
         "print('rank', os.environ.get('RANK'), 'done', flush=True)\n";
}

ClusterSpec python_job(const std::string& name, const std::string& script_path, const std::string& consistency) {
  ClusterSpec spec;
  spec.name = name;
  spec.slots = 1;
  spec.command = "[/usr/bin/python3, " + script_path + "]";
  spec.extra = "consistency: " + consistency + "\n";
  return spec;
}

/// Host 3's torch is 9.9.9; `job` runs the script (in its shared directory) with `consistency`
/// on `spec`'s hosts, PYTHONPATH at the per-host site.
void write_torch_job(const TestCluster& cluster, ClusterJob& job, const std::string& consistency, ClusterSpec spec = {},
                     int first_generation_s = 0) {
  fake_torch_on(cluster, 3);
  std::string script_path = job.dir() + "/train.py";
  std::ofstream(script_path) << script(first_generation_s);
  ClusterSpec python = python_job(spec.name, script_path, consistency);
  spec.slots = python.slots;
  spec.command = python.command;
  spec.extra = python.extra + spec.extra;
  // PYTHONPATH names the site on every host; only host 3 has one there.
  spec.worker_extra = "  env: {PYTHONPATH: " + std::string(kSite) + "}\n";
  job.write_spec(spec);
}

std::vector<nlohmann::json> consistency(ClusterJob& job) { return job.events("stack.consistency"); }

void report_costs(ClusterJob& job) {
  for (const auto& stack : job.events("host.stack")) {
    MESSAGE("stack fingerprint on " << stack.value("host", "?") << ": " << stack.value("ms", -1) << " ms");
  }
}

}  // namespace

TEST_CASE("a host with another torch: consistency strict refuses naming it with both versions, and nothing is left") {
  TestCluster cluster(3);
  DTRAIN_REQUIRE_CLUSTER(cluster);
  ClusterJob job(cluster, "stack-strict");
  write_torch_job(cluster, job, "strict");
  REQUIRE(job.run({}, 60000));
  INFO("out: " << job.out() << "\nerr: " << job.err());
  CHECK(job.exit_code() == 3);
  auto found = consistency(job);
  REQUIRE(found.size() == 1);
  CHECK(found[0]["action"] == "refused");
  REQUIRE(found[0]["differences"].size() == 1);
  const auto& difference = found[0]["differences"][0];
  CHECK(difference["host"] == cluster.host(3).name);
  CHECK(difference["item"] == "torch");
  CHECK(difference["value"] == "9.9.9");
  std::string majority = difference.value("majority", "");
  CHECK(!majority.empty());
  CHECK(majority != "9.9.9");
  CHECK(difference["majority_hosts"] == 2);
  // Side by side on the console and in the summary: the host, the item, both versions.
  std::string console = job.out() + job.err();
  CHECK(console.find(cluster.host(3).name + "  torch  9.9.9") != std::string::npos);
  CHECK(console.find(majority + " (2 hosts)") != std::string::npos);
  CHECK(console.find("cannot continue: the software stack differs between hosts (consistency: strict)") != std::string::npos);
  CHECK(job.events("worker.started").empty());
  // dtrain status says it too, from state.json.
  CommandOutput status = cluster.exec("ctl", {"env", "DTRAIN_HOME=" + job.dir() + "/home", DTRAIN_EXE, "status", job.run_id()});
  CHECK(status.output.find("stack") != std::string::npos);
  CHECK(status.output.find(cluster.host(3).name + " differs: torch 9.9.9") != std::string::npos);
  // dtrain hosts says it before any run: the host's own dtrain fingerprints it, as its agent would.
  CommandOutput hosts = cluster.exec("ctl", {DTRAIN_EXE, "hosts", job.dir() + "/job.yaml"});
  INFO("dtrain hosts: " << hosts.output);
  CHECK(hosts.status == 3);
  CHECK(hosts.output.find("DIFFERS") != std::string::npos);
  CHECK(hosts.output.find(cluster.host(3).name + ": torch is 9.9.9 there, " + majority + " on 2 other host(s)") !=
        std::string::npos);
  report_costs(job);
  check_nothing_left(cluster, job);
}

TEST_CASE("a host with another torch: consistency warn starts, the run finishes, and the run log has the warning") {
  TestCluster cluster(3);
  DTRAIN_REQUIRE_CLUSTER(cluster);
  ClusterJob job(cluster, "stack-warn");
  write_torch_job(cluster, job, "warn");
  REQUIRE(job.run({}, 90000));
  INFO("out: " << job.out() << "\nerr: " << job.err());
  CHECK(job.exit_code() == 0);
  auto found = consistency(job);
  REQUIRE(found.size() == 1);
  CHECK(found[0]["action"] == "warned");
  CHECK(found[0]["differences"][0]["host"] == cluster.host(3).name);
  CHECK((job.out() + job.err()).find("warning: the software stack differs between hosts (consistency: warn)") !=
        std::string::npos);
  CHECK(job.events("worker.started").size() == 3);
  auto stacks = job.events("host.stack");
  CHECK(stacks.size() == 3);
  for (const auto& stack : stacks) {
    std::string torch;
    for (const auto& item : stack["items"]) {
      if (item["item"] == "torch") torch = item["value"];
    }
    CHECK((stack["host"] == cluster.host(3).name) == (torch == "9.9.9"));
  }
  report_costs(job);
  check_nothing_left(cluster, job);
}

TEST_CASE("another copy of the script on one host: consistency strict refuses with both hashes named") {
  TestCluster cluster(3);
  DTRAIN_REQUIRE_CLUSTER(cluster);
  for (int number = 1; number <= 3; ++number) {
    write_on_host(cluster, number, kScript, script() + (number == 2 ? "# edited on this host only\n" : ""));
  }
  ClusterJob job(cluster, "stack-script");
  job.write_spec(python_job("stack-script", kScript, "strict"));
  REQUIRE(job.run({}, 60000));
  INFO("out: " << job.out() << "\nerr: " << job.err());
  CHECK(job.exit_code() == 3);
  auto found = consistency(job);
  REQUIRE(found.size() == 1);
  REQUIRE(found[0]["differences"].size() == 1);
  const auto& difference = found[0]["differences"][0];
  CHECK(difference["host"] == cluster.host(2).name);
  CHECK(difference["item"] == std::string("file ") + kScript);
  std::string value = difference["value"], majority = difference["majority"];
  CHECK(value.size() == 64);
  CHECK(majority.size() == 64);
  CHECK(value != majority);
  std::string console = job.out() + job.err();
  CHECK(console.find(value) != std::string::npos);
  CHECK(console.find(majority) != std::string::npos);
  check_nothing_left(cluster, job);
}

TEST_CASE("a spare with another torch is left out with its reason: a lost host makes the run shrink instead") {
  TestCluster cluster(3);
  DTRAIN_REQUIRE_CLUSTER(cluster);
  ClusterJob job(cluster, "stack-spare");
  ClusterSpec spec;
  spec.hosts = {1, 2};
  spec.spares = {3};
  spec.extra = "elastic: {min_hosts: 1, max_restarts: 1}\n";
  write_torch_job(cluster, job, "strict", spec, 60);
  job.start();
  REQUIRE(job.wait_exec());
  REQUIRE(job.wait_running(0, 60000));
  // The spare may say hello after the hosts: it is judged when it does.
  CHECK(wait_until([&] { return consistency(job).size() == 2; }, 20000));
  auto found = consistency(job);
  REQUIRE(found.size() == 2);
  CHECK(found[0]["action"] == "started");
  CHECK(found[1]["action"] == "spare left out");
  CHECK(found[1]["hosts"] == nlohmann::json::array({cluster.host(3).name}));
  CHECK(found[1]["detail"].get<std::string>().find("it is not used") != std::string::npos);
  REQUIRE(cluster.kill(2).status == 0);
  REQUIRE(job.wait(90000));
  INFO("out: " << job.out() << "\nerr: " << job.err());
  CHECK(job.exit_code() == 0);
  auto plans = job.events("plan.generation");
  REQUIRE(plans.size() >= 2);
  CHECK(plans.back()["hosts"] == nlohmann::json::array({cluster.host(1).name}));
  for (const auto& started : job.events("worker.started")) CHECK(started["host"] != cluster.host(3).name);
  check_nothing_left(cluster, job);
}
