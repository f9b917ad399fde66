// A `dtrain` on a remote host's PATH is used as the agent only when its sha256 equals this
// binary's; one that merely prints the right version is not trusted: dtrain copies itself into
// the per-user cache instead and says so. Real sshd on the namespace test cluster; the fake
// PATH entry is a bind mount over /usr/local/bin inside one host's private mount namespace.

#include <doctest/doctest.h>

#include <poll.h>
#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>

#include "launcher/base/version.h"
#include "launcher/transport/ssh_transport.h"
#include "tests/integration/cluster_fixture.h"

using namespace dtrain;
using namespace dtrain::transport;
using dtrain::testing::InControlNamespace;
using dtrain::testing::TestCluster;
using dtrain::testing::run_command;

namespace {

std::string run_to_end(SshConnection& connection, int timeout_ms = 60000) {
  std::string out;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (!connection.closed() && std::chrono::steady_clock::now() < deadline) {
    std::vector<pollfd> fds = connection.poll_fds();
    ::poll(fds.data(), fds.size(), 50);  // also wakes for deadlines
    connection.pump();
    out += connection.take_received();
  }
  return out + connection.take_received();
}

SshOptions cluster_options(const TestCluster& cluster) {
  SshOptions options;
  options.user = cluster.user();
  options.identity_files = {cluster.key_path()};
  options.known_hosts = cluster.known_hosts_path();
  options.use_agent = false;
  options.connect_timeout = Millis(5000);
  options.local_binary = DTRAIN_EXE;
  options.agent_args = {"--version"};  // what runs as the "agent": proves which binary it was
  return options;
}

// Puts `dtrain` (mode 0755, contents `program`) in /usr/local/bin on host `number` only: a bind
// mount inside that host's mount namespace, gone with the cluster.
void put_on_host_path(const TestCluster& cluster, int number, const std::string& program) {
  std::string bin = cluster.host(number).dir + "/fakebin";
  std::filesystem::create_directories(bin);
  std::ofstream(bin + "/dtrain", std::ios::binary | std::ios::trunc) << program;
  REQUIRE(::chmod((bin + "/dtrain").c_str(), 0755) == 0);
  std::string sshd_pid = TestCluster::read_text(cluster.host(number).dir + "/sshd.pid");
  sshd_pid.erase(sshd_pid.find_last_not_of(" \n") + 1);
  auto mounted = run_command({"nsenter", "-t", sshd_pid, "-m", "mount", "-n", "--bind", bin, "/usr/local/bin"});
  REQUIRE_MESSAGE(mounted.status == 0, mounted.output);
}

std::string file_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

}  // namespace

TEST_CASE("ssh provisioning: a dtrain on PATH with the right version but another hash is not used") {
  TestCluster cluster(2);
  DTRAIN_REQUIRE_CLUSTER(cluster);
  InControlNamespace in_ctl(cluster);
  std::string version_line = std::string("dtrain ") + kVersion;
  // Host 1: an impostor that claims the version. Host 2: this very binary, byte for byte.
  put_on_host_path(cluster, 1, "#!/bin/sh\necho '" + version_line + "'\n");
  put_on_host_path(cluster, 2, file_text(DTRAIN_EXE));
  SshTransport transport(cluster_options(cluster));

  AgentTarget impostor_host;
  impostor_host.host = cluster.host(1).ip;
  auto impostor = transport.connect(impostor_host);
  REQUIRE(impostor.ok());
  std::string out = run_to_end(**impostor);
  INFO((*impostor)->close_reason());
  CHECK(out == version_line + "\n");  // the real binary answered --version, from the cache
  CHECK((*impostor)->info().provisioning.rfind("copied ", 0) == 0);
  CHECK((*impostor)->info().remote_dtrain == "/root/.cache/dtrain/" + std::string(kVersion) + "/dtrain");
  std::string log = (*impostor)->take_diagnostics();
  CHECK_MESSAGE(log.find("/usr/local/bin/dtrain on PATH says " + version_line + " but its sha256 differs") !=
                    std::string::npos,
                log);

  AgentTarget genuine_host;
  genuine_host.host = cluster.host(2).ip;
  auto genuine = transport.connect(genuine_host);
  REQUIRE(genuine.ok());
  CHECK(run_to_end(**genuine) == version_line + "\n");
  CHECK((*genuine)->info().provisioning == "in PATH");
  CHECK((*genuine)->info().remote_dtrain == "/usr/local/bin/dtrain");
}
