// ssh.client: openssh against real sshd's in the namespace test cluster: the system's `ssh`
// carries the agent protocol, provisions dtrain over the same connection, reaches a host that
// only another host can reach (ProxyJump through ssh_config), and refuses a changed host key as
// the libssh2 client does, each with a message that says what happened and the fix. Every test
// ends with no process left on any host.
#include <doctest/doctest.h>

#include <signal.h>
#include <sys/stat.h>

#include <chrono>
#include <fstream>
#include <functional>

#include <nlohmann/json.hpp>

#include "launcher/base/fd.h"
#include "launcher/base/version.h"
#include "launcher/proto/frame.h"
#include "launcher/transport/openssh_transport.h"
#include "launcher/transport/ssh_digest.h"
#include "launcher/transport/ssh_exec.h"
#include "launcher/transport/ssh_transport.h"
#include "tests/integration/cluster_fixture.h"

using namespace dtrain;
using namespace dtrain::transport;
using dtrain::testing::ClusterHost;
using dtrain::testing::InControlNamespace;
using dtrain::testing::TestCluster;
using dtrain::testing::run_command;

namespace {

/// Pumps `connection` as the supervisor's loop does until `done()` or `timeout_ms`.
bool drive(AgentConnection& connection, const std::function<bool()>& done, int timeout_ms = 20000) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::vector<pollfd> fds = connection.poll_fds();
    ::poll(fds.data(), fds.size(), 50);
    connection.pump();
  }
  return true;
}

std::string run_to_end(AgentConnection& connection, int timeout_ms = 30000) {
  std::string out;
  drive(connection, [&] {
    out += connection.take_received();
    return connection.closed();
  }, timeout_ms);
  return out + connection.take_received();
}

SshOptions openssh_options(const TestCluster& cluster) {
  SshOptions options;
  options.client = SshClient::openssh;
  options.openssh_config = cluster.ssh_config_path();  // names, user, key, known_hosts, BatchMode
  options.connect_timeout = Millis(5000);
  options.local_binary = DTRAIN_EXE;
  return options;
}

SshOptions libssh2_options(const TestCluster& cluster) {
  SshOptions options;
  options.user = cluster.user();
  options.identity_files = {cluster.key_path()};
  options.known_hosts = cluster.known_hosts_path();
  options.use_agent = false;
  options.connect_timeout = Millis(3000);
  options.local_binary = DTRAIN_EXE;
  return options;
}

std::unique_ptr<OpensshConnection> connect(OpensshTransport& transport, const std::string& host) {
  AgentTarget target;
  target.host = host;
  auto connection = transport.connect(target);
  REQUIRE(connection.ok());
  return std::move(*connection);
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
}

#define REQUIRE_HOSTS_CLEAN(cluster)                 \
  do {                                               \
    std::string left = (cluster).wait_hosts_clean(); \
    CHECK_MESSAGE(left.empty(), left);               \
  } while (0)

nlohmann::json agent_config(const std::string& host) {
  return {{"type", "config"}, {"protocol", 1}, {"run_id", "openssh-test"}, {"host", host},
          {"runtime_dir", "/tmp/dtrain-0/opensshtest"}, {"heartbeat_interval_ms", 1000},
          {"heartbeat_timeout_ms", 10000}, {"supervisor_time_ms", 0}};
}

/// Sends config, waits for the agent's hello; "" when it came, else what happened.
std::string expect_hello(AgentConnection& connection, const std::string& host) {
  connection.send(proto::encode_frame(agent_config(host)));
  proto::FrameDecoder decoder;
  std::optional<nlohmann::json> hello;
  std::string diagnostics;
  drive(connection, [&] {
    decoder.feed(connection.take_received());
    diagnostics += connection.take_diagnostics();
    auto next = decoder.next();
    if (next.ok() && next->has_value()) hello = **next;
    return hello.has_value() || connection.closed() || !next.ok();
  }, 60000);
  if (!hello) return "no hello: " + connection.close_reason() + " / " + diagnostics;
  if ((*hello)["type"] != "hello" || (*hello)["version"] != kVersion) return "unexpected: " + hello->dump();
  return "";
}

}  // namespace

TEST_CASE("openssh transport: the agent answers config with hello over the system's ssh, stdin EOF ends it") {
  ::signal(SIGPIPE, SIG_IGN);
  TestCluster cluster(1);
  DTRAIN_REQUIRE_CLUSTER(cluster);
  InControlNamespace in_ctl(cluster);
  SshOptions options = openssh_options(cluster);
  options.remote_dtrain = DTRAIN_EXE;  // the build tree is visible on the test hosts
  OpensshTransport transport(options);
  auto connection = connect(transport, cluster.host(1).name);
  CHECK(expect_hello(*connection, cluster.host(1).name) == "");
  CHECK(connection->started());
  CHECK(connection->info().provisioning == "given");
  CHECK(connection->info().remote_dtrain == DTRAIN_EXE);
  // $SSH_CONNECTION names the control namespace's address, which is ours: MASTER_ADDR material.
  CHECK(connection->local_address() == cluster.value("DTRAIN_TESTCLUSTER_CONTROL_IP"));
  connection->shutdown(5000);
  CHECK(connection->closed());
  CHECK_FALSE(connection->failed());
  REQUIRE_HOSTS_CLEAN(cluster);
}

TEST_CASE("openssh transport: provisioning copies dtrain over the same ssh, then reuses the copy") {
  ::signal(SIGPIPE, SIG_IGN);
  TestCluster cluster(1);
  DTRAIN_REQUIRE_CLUSTER(cluster);
  InControlNamespace in_ctl(cluster);
  SshOptions options = openssh_options(cluster);
  options.agent_args = {"--version"};  // what runs after provisioning: proves the copy works
  OpensshTransport transport(options);
  auto first = connect(transport, cluster.host(1).name);
  std::string out = run_to_end(*first, 60000);
  INFO(first->close_reason());
  CHECK(out == std::string("dtrain ") + kVersion + "\n");
  CHECK(starts_with(first->info().provisioning, "copied "));
  MESSAGE("openssh provisioning: " << first->info().provisioning);
  std::string copied = cluster.host(1).home() + "/.cache/dtrain/" + kVersion + "/dtrain";
  struct stat info {};
  REQUIRE(::stat(copied.c_str(), &info) == 0);
  CHECK((info.st_mode & 0777) == 0755);
  CHECK(sha256_hex(*read_file(copied)) == sha256_hex(*read_file(DTRAIN_EXE)));

  auto again = connect(transport, cluster.host(1).name);
  CHECK(run_to_end(*again) == out);
  CHECK(again->info().provisioning == "cached");

  // A stale binary of the same version (another build) is replaced, not trusted.
  write_text(copied, "#!/bin/sh\necho stale\n");
  auto replaced = connect(transport, cluster.host(1).name);
  CHECK(run_to_end(*replaced, 60000) == out);
  CHECK(starts_with(replaced->info().provisioning, "copied "));

  // ssh.remote_dtrain pointing nowhere: a clear exit-127 message.
  options.remote_dtrain = "/nonexistent/dtrain";
  OpensshTransport pinned(options);
  auto missing = connect(pinned, cluster.host(1).name);
  run_to_end(*missing);
  CHECK(missing->close_reason().find("exited with code 127 (/nonexistent/dtrain not found on the host") !=
        std::string::npos);
  REQUIRE_HOSTS_CLEAN(cluster);
}

TEST_CASE("openssh transport: a host reached only through another (ProxyJump) runs the agent - libssh2 cannot reach it") {
  ::signal(SIGPIPE, SIG_IGN);
  TestCluster cluster(2);
  DTRAIN_REQUIRE_CLUSTER(cluster);
  std::string error;
  std::string config = cluster.hide_behind(2, 1, &error);
  REQUIRE_MESSAGE(!config.empty(), error);
  InControlNamespace in_ctl(cluster);
  const std::string hidden = cluster.host(2).name;

  // Proof that the firewall holds: the built-in client, which reads no ssh_config, times out.
  SshOptions direct = libssh2_options(cluster);
  direct.remote_command = "echo reached";
  SshTransport libssh2(direct);
  AgentTarget target;
  target.host = hidden;
  auto blocked = libssh2.connect(target);
  REQUIRE(blocked.ok());
  run_to_end(**blocked, 20000);
  CHECK((*blocked)->failed());
  CHECK((*blocked)->close_reason().find(hidden + ": connect to " + cluster.host(2).ip + ":22 timed out") == 0);

  SshOptions options = openssh_options(cluster);
  options.openssh_config = config;
  options.remote_dtrain = DTRAIN_EXE;
  OpensshTransport transport(options);
  auto connection = connect(transport, hidden);
  CHECK(expect_hello(*connection, hidden) == "");
  // Through the jump host, the address the hidden host saw is host 1's: not ours.
  CHECK(connection->info().ssh_connection.find(cluster.host(1).ip + " ") == 0);
  CHECK(connection->local_address() == "");
  connection->shutdown(5000);
  CHECK_FALSE(connection->failed());

  // Provisioning works through the jump too (one ssh carries probe, copy and agent).
  options.remote_dtrain.clear();
  options.agent_args = {"--version"};
  OpensshTransport provisioning(options);
  auto copy = connect(provisioning, hidden);
  CHECK(run_to_end(*copy, 60000) == std::string("dtrain ") + kVersion + "\n");
  CHECK(starts_with(copy->info().provisioning, "copied "));
  REQUIRE_HOSTS_CLEAN(cluster);
}

TEST_CASE("a changed host key is refused by both clients, each naming the key and the fix") {
  ::signal(SIGPIPE, SIG_IGN);
  TestCluster cluster(1);
  DTRAIN_REQUIRE_CLUSTER(cluster);
  dtrain::testing::CommandOutput rekeyed = cluster.rekey(1);
  REQUIRE_MESSAGE(rekeyed.status == 0, rekeyed.output);
  InControlNamespace in_ctl(cluster);
  const std::string host = cluster.host(1).name;
  AgentTarget target;
  target.host = host;

  SshOptions libssh2_side = libssh2_options(cluster);
  libssh2_side.remote_command = "echo connected";
  SshTransport libssh2(libssh2_side);
  auto refused = libssh2.connect(target);
  REQUIRE(refused.ok());
  CHECK(run_to_end(**refused) == "");
  CHECK((*refused)->failed());
  INFO((*refused)->close_reason());
  CHECK((*refused)->close_reason().find(host + ": host key changed: ") == 0);
  CHECK((*refused)->close_reason().find("ssh-keygen -R") != std::string::npos);

  for (HostKeyPolicy policy : {HostKeyPolicy::strict, HostKeyPolicy::accept_new}) {
    SshOptions options = openssh_options(cluster);
    options.host_key_policy = policy;
    options.remote_dtrain = DTRAIN_EXE;
    OpensshTransport transport(options);
    auto connection = connect(transport, host);
    CHECK(run_to_end(*connection) == "");
    CHECK(connection->failed());
    INFO(to_string(policy) << ": " << connection->close_reason());
    CHECK(connection->close_reason().find(host + ": host key changed: OpenSSH refused it (Offending ED25519 key in " +
                                          cluster.known_hosts_path() + ":1)") == 0);
    CHECK(connection->close_reason().find("ssh-keygen -R '" + host + "' -f '" + cluster.known_hosts_path() + "'") !=
          std::string::npos);
  }
  // The same refusal through ssh_exec (drills, `dtrain hosts`): an error, not an exit code.
  SshOptions options = openssh_options(cluster);
  auto ran = ssh_exec(options, target, "echo connected", Millis(10000));
  REQUIRE_FALSE(ran.ok());
  CHECK(ran.error().message.find(host + ": host key changed: ") == 0);
  REQUIRE_HOSTS_CLEAN(cluster);
}

TEST_CASE("host certificates: openssh trusts a @cert-authority line - libssh2 refuses the host and points to openssh") {
  ::signal(SIGPIPE, SIG_IGN);
  TestCluster cluster(1);
  DTRAIN_REQUIRE_CLUSTER(cluster);
  const ClusterHost& h1 = cluster.host(1);
  // A site CA signs host 1's key; sshd presents the certificate; known_hosts holds only the CA.
  std::string ca = cluster.state_dir() + "/host_ca";
  REQUIRE(dtrain::testing::run_command({"ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "dtrain-test-ca", "-f", ca}).status == 0);
  auto signed_key = dtrain::testing::run_command({"ssh-keygen", "-q", "-s", ca, "-I", h1.name, "-h", "-n", h1.name + "," + h1.ip,
                                 h1.dir + "/ssh_host_ed25519_key.pub"});
  REQUIRE_MESSAGE(signed_key.status == 0, signed_key.output);
  {
    std::ofstream config(h1.dir + "/sshd_config", std::ios::app);
    config << "HostCertificate " << h1.dir << "/ssh_host_ed25519_key-cert.pub\n";
  }
  REQUIRE(cluster.restart(1).status == 0);
  std::string ca_known_hosts = cluster.state_dir() + "/known_hosts_ca";
  // The name and the address: the cluster's ssh_config sets HostName, which OpenSSH looks up.
  write_text(ca_known_hosts, "@cert-authority " + h1.name + "," + h1.ip + " " + TestCluster::read_text(ca + ".pub"));

  InControlNamespace in_ctl(cluster);
  AgentTarget target;
  target.host = h1.name;
  auto both_clients = [&](const std::string& libssh2_expected) {
    SshOptions openssh = openssh_options(cluster);
    openssh.known_hosts = ca_known_hosts;  // overrides the cluster config's file: only the CA
    auto via_openssh = ssh_exec(openssh, target, "echo certified", Millis(10000));
    REQUIRE_MESSAGE(via_openssh.ok(), via_openssh.error().message);
    CHECK(via_openssh->output == "certified\n");

    SshOptions builtin = libssh2_options(cluster);
    builtin.known_hosts = ca_known_hosts;
    builtin.global_known_hosts.clear();
    auto via_libssh2 = ssh_exec(builtin, target, "echo certified", Millis(10000));
    REQUIRE_FALSE(via_libssh2.ok());
    INFO(via_libssh2.error().message);
    CHECK(via_libssh2.error().message.find(libssh2_expected) != std::string::npos);
    CHECK(via_libssh2.error().message.find(ca_known_hosts + ":1") != std::string::npos);
    CHECK(via_libssh2.error().message.find("set ssh.client: openssh") != std::string::npos);
  };
  SUBCASE("the host offers its plain key too: libssh2 sees it, but only the CA vouches for the host") {
    both_clients(h1.name + ": host key not verifiable here: ");
  }
  SUBCASE("the host presents only its certificate: libssh2 cannot even agree on a host key algorithm") {
    {
      std::ofstream config(h1.dir + "/sshd_config", std::ios::app);
      config << "HostKeyAlgorithms ssh-ed25519-cert-v01@openssh.com\n";
    }
    REQUIRE(cluster.restart(1).status == 0);
    both_clients(h1.name + ": SSH handshake with ");
  }
  REQUIRE_HOSTS_CLEAN(cluster);
}
