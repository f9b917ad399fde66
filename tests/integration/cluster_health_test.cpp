// Health gates (issue 29) on the namespace cluster: each host's agent checks its host before the
// first generation, and a host that fails is refused with its check's message while a spare
// takes its place. Every host's SSH sessions get a fake sysfs root, a fake NVML and its values
// file under the host's private /tmp (testcluster.sh up --env), so one host can have an
// InfiniBand port down, another GPU memory held by a process that is not the run's, and a third
// a checkpoint directory that never answers (a FIFO where the probe file goes). The site's own
// check (health.command) follows its exit-code contract: 1 keeps the host out with its output as
// the reason; garbage, another exit code or a timeout lets the host in with a warning. After
// every run nothing of it is left on any host.

#include <doctest/doctest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>

#include "tests/integration/cluster_job.h"

using namespace dtrain::testing;

namespace {

constexpr const char* kFakeRoot = "/tmp/dtrain-fake-root";
constexpr const char* kFakeNvml = "/tmp/dtrain-fake-nvml.so";
constexpr const char* kNvmlValues = "/tmp/dtrain-fake-nvml-values";
constexpr const char* kHostCheckpoints = "/tmp/dtrain-health-ckpt";

/// Where `path` (as host `number` sees it under its private /tmp) is on this machine.
std::string on_host(const TestCluster& cluster, int number, const std::string& path) {
  return cluster.host(number).dir + path;
}

void write_on_host(const TestCluster& cluster, int number, const std::string& path, const std::string& text) {
  std::string real = on_host(cluster, number, path);
  std::filesystem::create_directories(std::filesystem::path(real).parent_path());
  std::ofstream(real) << text;
}

/// Three hosts whose SSH sessions see the fake sysfs root and the fake NVML (copied into each
/// host's /tmp: the build tree's path may hold blanks, which sshd's SetEnv cannot carry).
std::vector<std::string> fake_hardware() {
  return {"--env", std::string("DTRAIN_SYSFS_ROOT=") + kFakeRoot, "--env", std::string("DTRAIN_NVML_LIBRARY=") + kFakeNvml,
          "--env", std::string("DTRAIN_FAKE_NVML_VALUES=") + kNvmlValues};
}

/// Every host: one healthy fake GPU, and eth0 (its link to the others) up in the fake sysfs.
void install_fake_hardware(const TestCluster& cluster) {
  for (size_t number = 1; number <= cluster.hosts().size(); ++number) {
    int host = static_cast<int>(number);
    std::filesystem::copy_file(DTRAIN_FAKE_NVML, on_host(cluster, host, kFakeNvml),
                               std::filesystem::copy_options::overwrite_existing);
    write_on_host(cluster, host, kNvmlValues, "gpus=1\nmemory_used_mb=0\n");
    write_on_host(cluster, host, std::string(kFakeRoot) + "/sys/class/net/eth0/operstate", "up\n");
  }
}

/// Hosts 1 and 2 with one slot each, host 3 the spare; the worker prints and exits.
ClusterSpec health_job(const std::string& name, const std::string& health) {
  ClusterSpec spec;
  spec.name = name;
  spec.hosts = {1, 2};
  spec.spares = {3};
  spec.slots = 1;
  spec.command = "[/bin/sh, -c, 'echo rank $RANK on $(hostname) done']";
  spec.extra = "health:\n" + health;
  return spec;
}

const nlohmann::json* health_of(const std::vector<nlohmann::json>& reports, const std::string& host) {
  for (const auto& report : reports) {
    if (report.value("host", "") == host) return &report;
  }
  return nullptr;
}

/// The run refused host 2 with a failed check whose message holds `expected`, quarantined it,
/// and ran on hosts 1 and 3 to the end.
void check_refused_and_replaced(const TestCluster& cluster, ClusterJob& job, const std::string& check_prefix,
                                const std::string& expected) {
  INFO("out: " << job.out() << "\nerr: " << job.err());
  CHECK(job.exit_code() == 0);
  auto reports = job.events("host.health");
  const nlohmann::json* bad = health_of(reports, cluster.host(2).name);
  REQUIRE(bad != nullptr);
  INFO("host 2's report: " << bad->dump());
  CHECK((*bad)["verdict"] == "fail");
  CHECK((*bad)["action"] == "left out");
  bool named = false;
  for (const auto& check : (*bad)["checks"]) {
    if (check.value("verdict", "") == "fail" && check.value("name", "").rfind(check_prefix, 0) == 0 &&
        check.value("message", "").find(expected) != std::string::npos) {
      named = true;
    }
  }
  CHECK(named);
  for (int healthy : {1, 3}) {
    const nlohmann::json* good = health_of(reports, cluster.host(healthy).name);
    REQUIRE(good != nullptr);
    CHECK((*good)["verdict"] != "fail");
    CHECK((*good)["action"] == "admitted");
    // The supervisor adds the clock offset it measured (the hosts share this machine's clock).
    bool clock = false;
    for (const auto& check : (*good)["checks"]) {
      if (check.value("name", "") == "clock offset" && check.value("verdict", "") == "ok") clock = true;
    }
    CHECK(clock);
  }
  auto quarantined = job.events("host.quarantined");
  REQUIRE(quarantined.size() == 1);
  CHECK(quarantined[0]["host"] == cluster.host(2).name);
  std::set<std::string> used;
  for (const auto& started : job.events("worker.started")) used.insert(started.value("host", ""));
  CHECK(used == std::set<std::string>{cluster.host(1).name, cluster.host(3).name});
  CHECK((job.out() + job.err()).find(cluster.host(2).name + " failed its health check") != std::string::npos);
  check_nothing_left(cluster, job);
}

}  // namespace

TEST_CASE("an InfiniBand port down: the host is refused with the port's state and the spare takes its place") {
  TestCluster cluster(3, fake_hardware());
  DTRAIN_REQUIRE_CLUSTER(cluster);
  install_fake_hardware(cluster);
  write_on_host(cluster, 2, std::string(kFakeRoot) + "/sys/class/infiniband/mlx5_0/ports/1/state", "1: DOWN\n");
  write_on_host(cluster, 2, std::string(kFakeRoot) + "/sys/class/infiniband/mlx5_0/ports/1/counters/link_downed", "3\n");
  write_on_host(cluster, 1, std::string(kFakeRoot) + "/sys/class/infiniband/mlx5_0/ports/1/state", "4: ACTIVE\n");
  write_on_host(cluster, 1, std::string(kFakeRoot) + "/sys/class/infiniband/mlx5_0/ports/1/counters/link_downed", "0\n");
  ClusterJob job(cluster, "health-ib");
  job.write_spec(health_job("health-ib", "  enabled: true\n"));
  REQUIRE(job.run({}, 90000));
  check_refused_and_replaced(cluster, job, "infiniband", "DOWN");
}

TEST_CASE("GPU memory held by a process that is not the run's: refused after the reclaim wait, the spare runs") {
  TestCluster cluster(3, fake_hardware());
  DTRAIN_REQUIRE_CLUSTER(cluster);
  install_fake_hardware(cluster);
  // 2 GiB on GPU 0 held by pid 4242 (no such process of the run), over the 512 MiB allowed.
  write_on_host(cluster, 2, kNvmlValues, "gpus=1\nmemory_used_mb=2048\nprocess=0:4242:2048\n");
  ClusterJob job(cluster, "health-gpu-memory");
  job.write_spec(health_job("health-gpu-memory", "  reclaim_wait: 1s\n"));
  REQUIRE(job.run({}, 90000));
  check_refused_and_replaced(cluster, job, "gpu 0 memory", "4242");
}

TEST_CASE("a checkpoint directory that never answers: refused within write_timeout, the spare runs") {
  TestCluster cluster(3, fake_hardware());
  DTRAIN_REQUIRE_CLUSTER(cluster);
  install_fake_hardware(cluster);
  // Each host has its own /tmp: the directory is host 2's alone, and its probe file a FIFO that
  // nobody reads, so opening it for writing blocks as a hung mount would.
  for (int number : {1, 2, 3}) std::filesystem::create_directories(on_host(cluster, number, kHostCheckpoints));
  std::string fifo = on_host(cluster, 2, std::string(kHostCheckpoints) + "/.dtrain-health-probe");
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  ClusterJob job(cluster, "health-ckpt");
  ClusterSpec spec = health_job("health-ckpt", "  write_timeout: 1s\n");
  spec.extra += std::string("checkpoint: {dir: ") + kHostCheckpoints + "}\n";
  job.write_spec(spec);
  REQUIRE(job.run({}, 90000));
  check_refused_and_replaced(cluster, job, "checkpoint dir", "1s");
}

TEST_CASE("the site's health command: exit 1 keeps a host out with its output, garbage and a timeout warn and let in") {
  TestCluster cluster(3, fake_hardware());
  DTRAIN_REQUIRE_CLUSTER(cluster);
  install_fake_hardware(cluster);
  // One command for every host; what it does depends on a file in the host's own /tmp.
  write_on_host(cluster, 1, "/tmp/dtrain-site-check", "garbage");
  write_on_host(cluster, 2, "/tmp/dtrain-site-check", "fail");
  write_on_host(cluster, 3, "/tmp/dtrain-site-check", "slow");
  std::string command =
      "case $(cat /tmp/dtrain-site-check) in "
      "garbage) printf '\\\\001\\\\377\\\\376 not a verdict'; exit 7;; "
      "fail) echo 'GPU 3 has 12 uncorrectable ECC errors: drain this node'; exit 1;; "
      "slow) sleep 30;; esac";
  ClusterJob job(cluster, "health-site");
  job.write_spec(health_job("health-site", "  command: \"" + command + "\"\n  command_timeout: 1s\n"));
  REQUIRE(job.run({}, 90000));
  check_refused_and_replaced(cluster, job, "site command", "12 uncorrectable ECC errors");
  auto reports = job.events("host.health");
  for (int warned : {1, 3}) {
    const nlohmann::json* report = health_of(reports, cluster.host(warned).name);
    REQUIRE(report != nullptr);
    INFO("host " << warned << ": " << report->dump());
    CHECK((*report)["verdict"] == "warn");
    bool site = false;
    for (const auto& check : (*report)["checks"]) {
      if (check.value("name", "") == "site command" && check.value("verdict", "") == "warn") site = true;
    }
    CHECK(site);
  }
}
