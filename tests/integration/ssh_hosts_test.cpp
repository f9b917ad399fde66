// `dtrain hosts SPEC`: preflight over the namespace cluster, run from the control namespace as a
// user would. Every host ok → exit 0 and a row per host; a partitioned host → exit 3 naming it,
// the phase and the fix, while the other hosts are still reported ok.
#include <doctest/doctest.h>

#include <fstream>

#include <nlohmann/json.hpp>

#include "launcher/base/version.h"
#include "tests/integration/cluster_fixture.h"

using dtrain::testing::CommandOutput;
using dtrain::testing::TestCluster;

namespace {

std::string write_spec(const TestCluster& cluster, const std::string& extra_host = "") {
  std::string path = cluster.state_dir() + "/job.yaml";
  std::ofstream out(path);
  out << "version: 1\nname: preflight\nhosts:\n  - " << cluster.host(1).name << "\n  - " << cluster.host(2).name << "\n";
  if (!extra_host.empty()) out << "  - " << extra_host << "\n";
  out << "ssh:\n  user: " << cluster.user() << "\n  identity: [" << cluster.key_path() << "]\n  known_hosts: "
      << cluster.known_hosts_path() << "\n  connect_timeout: 2s\n"
      << "worker:\n  command: [\"true\"]\n  backend: gloo\n"
      << "checkpoint:\n  dir: /tmp/ckpt/preflight\n";
  return path;
}

}  // namespace

TEST_CASE("dtrain hosts: every host checked in parallel, a cut-off host fails with reason and fix") {
  TestCluster cluster(2);
  DTRAIN_REQUIRE_CLUSTER(cluster);
  std::string spec = write_spec(cluster, "localhost");

  CommandOutput table = cluster.exec("ctl", {DTRAIN_EXE, "hosts", spec});
  INFO(table.output);
  CHECK(table.status == 0);
  CHECK(table.output.find("HOST") != std::string::npos);
  CHECK(table.output.find(cluster.host(1).name) != std::string::npos);
  CHECK(table.output.find("will be copied") != std::string::npos);

  CommandOutput json = cluster.exec("ctl", {"sh", "-c", "exec \"$0\" hosts \"$1\" --json 2>/dev/null", DTRAIN_EXE, spec});
  REQUIRE(json.status == 0);
  auto document = nlohmann::json::parse(json.output);
  REQUIRE(document["hosts"].size() == 3);
  for (int i = 0; i < 2; ++i) {
    const auto& host = document["hosts"][i];
    CHECK(host["host"] == cluster.host(i + 1).name);
    CHECK(host["ok"] == true);
    CHECK(host["ssh"] == "ok");
    CHECK(host["user"] == cluster.user());
    CHECK(host["dtrain"] == "will be copied");
    CHECK(host["free_dir"] == "/tmp");  // nearest existing parent of checkpoint.dir
    CHECK(host["free_bytes"].get<int64_t>() > 0);
    CHECK(std::string(host["host_key"]).find("known (") == 0);
    CHECK(host["latency_ms"].get<int64_t>() >= 0);
  }
  CHECK(document["hosts"][2]["ssh"] == "local");

  REQUIRE(cluster.partition(2).status == 0);
  CommandOutput cut = cluster.exec("ctl", {DTRAIN_EXE, "hosts", spec});
  INFO(cut.output);
  CHECK(cut.status == 3);
  CHECK(cut.output.find("hosts that cannot run the job:") != std::string::npos);
  CHECK(cut.output.find(cluster.host(2).name + ": connect to " + cluster.host(2).ip + ":22 timed out after 2s") !=
        std::string::npos);
  CHECK(cut.output.find("  " + cluster.host(1).name + ": ") == std::string::npos);  // h1 has no problem line
}
