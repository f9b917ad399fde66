// ssh.client: openssh end to end on the namespace cluster, as a user on the launch node would
// run it: `dtrain submit` over the system's ssh with a site ssh_config in which one host is
// reachable only through another (ProxyJump), and `dtrain hosts` showing per host how it is
// reached (VIA) and why a host with a changed key is refused, under either client.
#include <doctest/doctest.h>

#include <fstream>
#include <set>

#include <nlohmann/json.hpp>

#include "tests/integration/cluster_job.h"

using namespace dtrain::testing;

namespace {

const char* kHostPrinter = "[/bin/sh, -c, 'echo \"ON $(hostname) RANK=$RANK\"']";

void write_file(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
}

/// The ssh: section's client lines, inserted into a spec written by cluster_spec_yaml.
std::string with_client(std::string yaml, const std::string& client_lines) {
  size_t at = yaml.find("ssh:\n");
  REQUIRE(at != std::string::npos);
  return yaml.insert(at + 5, client_lines);
}

}  // namespace

TEST_CASE("dtrain submit over openssh: a host behind a ProxyJump runs its ranks - nothing left anywhere") {
  TestCluster cluster(2);
  DTRAIN_REQUIRE_CLUSTER(cluster);
  std::string error;
  std::string config = cluster.hide_behind(2, 1, &error);
  REQUIRE_MESSAGE(!config.empty(), error);

  ClusterJob job(cluster, "openssh");
  ClusterSpec spec;
  spec.name = "openssh";
  spec.hosts = {1, 2};
  spec.command = kHostPrinter;
  std::string path = job.write_spec(spec);
  write_file(path, with_client(cluster_spec_yaml(cluster, spec), "  client: openssh\n  config: " + config + "\n"));
  REQUIRE(job.run());
  INFO(job.err());
  CHECK(job.exit_code() == 0);
  std::set<std::string> seen;
  for (int rank = 0; rank < 4; ++rank) {
    std::string log = job.rank_log(rank);
    INFO("rank " << rank << ": " << log);
    std::string expected_host = cluster.host(rank / 2 + 1).name;
    CHECK(log.find("ON " + expected_host + " RANK=" + std::to_string(rank)) != std::string::npos);
    seen.insert(expected_host);
  }
  CHECK(seen.size() == 2);
  // The supervisor's log says which transport reached each host.
  std::string supervisor_log = TestCluster::read_text(job.run_dir() + "/supervisor.log");
  CHECK(supervisor_log.find("host " + cluster.host(2).name + ": starting agent (" + cluster.host(2).name + " (openssh") !=
        std::string::npos);
  check_nothing_left(cluster, job);
}

TEST_CASE("dtrain hosts: VIA per host, and a host with a changed key refused with the reason by both clients") {
  TestCluster cluster(3);
  DTRAIN_REQUIRE_CLUSTER(cluster);
  std::string error;
  std::string config = cluster.hide_behind(2, 1, &error);
  REQUIRE_MESSAGE(!config.empty(), error);
  dtrain::testing::CommandOutput rekeyed = cluster.rekey(3);
  REQUIRE_MESSAGE(rekeyed.status == 0, rekeyed.output);

  std::string base = "version: 1\nname: via\nhosts:\n  - " + cluster.host(1).name + "\n  - " + cluster.host(2).name +
                     "\n  - " + cluster.host(3).name + "\n  - localhost\n";
  std::string tail = "worker:\n  command: [\"true\"]\n  backend: gloo\n";
  std::string openssh_spec = cluster.state_dir() + "/openssh.yaml";
  write_file(openssh_spec, base + "ssh:\n  client: openssh\n  config: " + config + "\n  connect_timeout: 3s\n" + tail);
  std::string libssh2_spec = cluster.state_dir() + "/libssh2.yaml";
  write_file(libssh2_spec, base + "ssh:\n  user: " + cluster.user() + "\n  identity: [" + cluster.key_path() +
                               "]\n  known_hosts: " + cluster.known_hosts_path() + "\n  connect_timeout: 2s\n" + tail);

  dtrain::testing::CommandOutput table = cluster.exec("ctl", {DTRAIN_EXE, "hosts", openssh_spec});
  INFO(table.output);
  CHECK(table.status == 3);
  CHECK(table.output.find("VIA") != std::string::npos);
  CHECK(table.output.find(cluster.host(3).name + ": host key changed: OpenSSH refused it") != std::string::npos);
  CHECK(table.output.find("(via openssh)") != std::string::npos);

  dtrain::testing::CommandOutput json =
      cluster.exec("ctl", {"sh", "-c", "exec \"$0\" hosts \"$1\" --json 2>/dev/null", DTRAIN_EXE, openssh_spec});
  auto document = nlohmann::json::parse(json.output, nullptr, false);
  REQUIRE_MESSAGE(document.is_object(), json.output);
  REQUIRE(document["hosts"].size() == 4);
  for (int i = 0; i < 2; ++i) {
    const auto& host = document["hosts"][i];
    INFO(host.dump());
    CHECK(host["via"] == "openssh");
    CHECK(host["ok"] == true);  // host 2 through the ProxyJump
    CHECK(host["user"] == cluster.user());
    CHECK(host["latency_ms"].get<int64_t>() >= 0);
  }
  CHECK(document["hosts"][2]["via"] == "openssh");
  CHECK(document["hosts"][2]["ok"] == false);
  CHECK(document["hosts"][2]["problems"][0].get<std::string>().find("host key changed") != std::string::npos);
  CHECK(document["hosts"][3]["via"] == "local");

  // The built-in client: host 1 fine, host 2 unreachable (it reads no ssh_config), host 3 refused.
  dtrain::testing::CommandOutput builtin =
      cluster.exec("ctl", {"sh", "-c", "exec \"$0\" hosts \"$1\" --json 2>/dev/null", DTRAIN_EXE, libssh2_spec});
  auto plain = nlohmann::json::parse(builtin.output, nullptr, false);
  REQUIRE_MESSAGE(plain.is_object(), builtin.output);
  CHECK(plain["hosts"][0]["via"] == "libssh2");
  CHECK(plain["hosts"][0]["ok"] == true);
  CHECK(plain["hosts"][1]["ok"] == false);
  CHECK(plain["hosts"][1]["problems"][0].get<std::string>().find("timed out") != std::string::npos);
  CHECK(plain["hosts"][2]["problems"][0].get<std::string>().find(cluster.host(3).name + ": host key changed: ") == 0);
  std::string left = cluster.wait_hosts_clean();
  CHECK_MESSAGE(left.empty(), left);
}

TEST_CASE("kill -9 of the supervisor over openssh: ssh passes the EOF on, every agent fences - nothing left anywhere") {
  TestCluster cluster(2);
  DTRAIN_REQUIRE_CLUSTER(cluster);
  std::string error;
  std::string config = cluster.hide_behind(2, 1, &error);
  REQUIRE_MESSAGE(!config.empty(), error);
  ClusterJob job(cluster, "openssh-k9");
  ClusterSpec spec;
  spec.name = "openssh-k9";
  spec.hosts = {1, 2};
  // Ignores SIGTERM and leaves a grandchild in its own session: only the fence's KILL ends both.
  spec.command = "[/bin/sh, -c, 'setsid sleep 300 & trap \"\" TERM; echo ready; while :; do sleep 0.2; done']";
  std::string path = job.write_spec(spec);
  write_file(path, with_client(cluster_spec_yaml(cluster, spec), "  client: openssh\n  config: " + config + "\n"));
  job.start();
  REQUIRE(job.wait_exec());
  REQUIRE(job.wait_running(0, 30000));
  // The supervisor's ssh children (and host 2's ProxyJump ssh) run in the control namespace.
  REQUIRE(cluster.pids_in_namespace(cluster.control_namespace()).size() >= 3);
  int64_t killed_at = now_ms();
  REQUIRE(::kill(job.pid(), SIGKILL) == 0);
  job.wait(5000);
  // Nothing of the run on the hosts and nothing in the control namespace (no orphaned ssh).
  std::string left = leftovers(cluster, job.run_id(), 2000 + 2000 + 3000);
  CHECK_MESSAGE(left.empty(), "left behind after kill -9 of the supervisor:\n" << left);
  MESSAGE("openssh: hosts and control namespace clean " << now_ms() - killed_at << " ms after kill -9");
}
