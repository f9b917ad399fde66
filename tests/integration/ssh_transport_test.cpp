// SshTransport against real sshd's in the namespace test cluster (scripts/testcluster.sh):
// streams, host key policies, authentication errors, partitions, quoting, provisioning, and
// the agent protocol over a real SSH channel. Every test ends with no process left on any host.
#include <doctest/doctest.h>

#include <sys/stat.h>

#include <chrono>
#include <fstream>
#include <functional>

#include <nlohmann/json.hpp>

#include "launcher/base/fd.h"
#include "launcher/base/version.h"
#include "launcher/proto/frame.h"
#include "launcher/transport/ssh_digest.h"
#include "launcher/transport/ssh_transport.h"
#include "tests/integration/cluster_fixture.h"

using namespace dtrain;
using namespace dtrain::transport;
using dtrain::testing::ClusterHost;
using dtrain::testing::CommandOutput;
using dtrain::testing::InControlNamespace;
using dtrain::testing::TestCluster;
using dtrain::testing::run_command;

namespace {

/// Pumps `connections` through one poll loop, as the supervisor does, until `done()` or
/// `timeout_ms`. Returns done().
bool drive(const std::vector<SshConnection*>& connections, const std::function<bool()>& done,
           int timeout_ms = 20000) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::vector<pollfd> fds;
    for (SshConnection* connection : connections) {
      for (const pollfd& fd : connection->poll_fds()) fds.push_back(fd);
    }
    ::poll(fds.data(), fds.size(), 50);  // also wakes for deadlines
    for (SshConnection* connection : connections) connection->pump();
  }
  return true;
}

/// Runs connection to its end, collecting stdout.
std::string run_to_end(SshConnection& connection, int timeout_ms = 20000) {
  std::string out;
  drive({&connection}, [&] {
    out += connection.take_received();
    return connection.closed();
  }, timeout_ms);
  out += connection.take_received();
  return out;
}

SshOptions cluster_options(const TestCluster& cluster) {
  SshOptions options;
  options.user = cluster.user();
  options.identity_files = {cluster.key_path()};
  options.known_hosts = cluster.known_hosts_path();
  options.use_agent = false;
  options.connect_timeout = Millis(5000);
  options.local_binary = DTRAIN_EXE;
  return options;
}

std::unique_ptr<SshConnection> connect(SshTransport& transport, const std::string& host, int port = 22) {
  AgentTarget target;
  target.host = host;
  target.port = port;
  auto connection = transport.connect(target);
  REQUIRE(connection.ok());
  return std::move(*connection);
}

std::string fingerprint_of(const std::string& public_key_file) {
  // "256 SHA256:abc... comment (ED25519)"
  CommandOutput listed = run_command({"ssh-keygen", "-lf", public_key_file});
  auto fields = split(listed.output, ' ');
  return fields.size() > 1 ? fields[1] : std::string();
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
}

std::string host_key_line(const TestCluster& cluster, int host, const std::string& name) {
  std::string pub = TestCluster::read_text(cluster.host(host).dir + "/ssh_host_ed25519_key.pub");
  auto fields = split(std::string(trim(pub)), ' ');
  return name + " " + fields.at(0) + " " + fields.at(1) + "\n";
}

#define REQUIRE_HOSTS_CLEAN(cluster)                 \
  do {                                               \
    std::string left = (cluster).wait_hosts_clean(); \
    CHECK_MESSAGE(left.empty(), left);               \
  } while (0)

}  // namespace

TEST_CASE("ssh transport: remote command streams stdin to stdout, stderr to diagnostics, exit code") {
  TestCluster cluster(2);
  DTRAIN_REQUIRE_CLUSTER(cluster);
  InControlNamespace in_ctl(cluster);
  REQUIRE_MESSAGE(in_ctl.error().empty(), in_ctl.error());

  SshOptions options = cluster_options(cluster);
  options.remote_command = "echo to-stderr >&2; cat; exit 7";
  SshTransport transport(options);
  // By name (resolved through the cluster's /etc/hosts) and by IP.
  auto by_name = connect(transport, cluster.host(1).name);
  auto by_ip = connect(transport, cluster.host(2).ip);

  std::string payload;
  for (int i = 0; i < 200000; ++i) payload += static_cast<char>('a' + i % 26);
  payload += std::string("\0\xff binary\n", 10);
  by_name->send(payload);
  by_name->close_input();
  by_ip->send("short");
  by_ip->close_input();

  std::string out_name, out_ip, err_name;
  REQUIRE(drive({by_name.get(), by_ip.get()}, [&] {
    out_name += by_name->take_received();
    out_ip += by_ip->take_received();
    err_name += by_name->take_diagnostics();
    return by_name->closed() && by_ip->closed();
  }));
  INFO(by_name->close_reason());
  CHECK(out_name == payload);
  CHECK(out_ip == "short");
  CHECK(err_name.find("to-stderr") != std::string::npos);
  CHECK_FALSE(by_name->failed());
  CHECK(by_name->exit_code() == 7);
  CHECK(by_name->close_reason() == cluster.host(1).name + ": remote command exited with code 7");
  CHECK(by_name->info().host_key_status.find("known (") == 0);
  CHECK(by_name->info().auth_method == cluster.key_path());
  CHECK(by_name->info().address == cluster.host(1).ip + ":22");
  MESSAGE("connect " << by_name->info().connect_ms << " ms, authenticated " << by_name->info().ready_ms
                     << " ms, command started " << by_name->info().started_ms << " ms");
  REQUIRE_HOSTS_CLEAN(cluster);
}

TEST_CASE("ssh transport: a command killed by a signal reports the signal, not exit 0") {
  TestCluster cluster(1);
  DTRAIN_REQUIRE_CLUSTER(cluster);
  InControlNamespace in_ctl(cluster);
  SshOptions options = cluster_options(cluster);
  options.remote_command = "exec sh -c 'kill -KILL $$'";
  SshTransport transport(options);
  auto connection = connect(transport, cluster.host(1).ip);
  run_to_end(*connection);
  CHECK(connection->exit_signal() == "KILL");
  CHECK(connection->close_reason().find("killed by signal KILL") != std::string::npos);
  REQUIRE_HOSTS_CLEAN(cluster);
}

TEST_CASE("ssh transport: host key policies") {
  TestCluster cluster(2);
  DTRAIN_REQUIRE_CLUSTER(cluster);
  InControlNamespace in_ctl(cluster);
  std::string known_hosts = cluster.state_dir() + "/test_known_hosts";
  SshOptions options = cluster_options(cluster);
  options.known_hosts = known_hosts;
  options.remote_command = "echo ran";
  const ClusterHost& h1 = cluster.host(1);
  std::string fingerprint = fingerprint_of(h1.dir + "/ssh_host_ed25519_key.pub");
  REQUIRE(starts_with(fingerprint, "SHA256:"));

  SUBCASE("strict refuses an unknown key, naming the fingerprint and the fix") {
    write_text(known_hosts, "");
    SshTransport transport(options);
    auto connection = connect(transport, h1.ip);
    CHECK(run_to_end(*connection).empty());
    CHECK(connection->failed());
    INFO(connection->close_reason());
    CHECK(starts_with(connection->close_reason(), h1.ip + ": host key unknown: " + h1.ip + ":22 presented ssh-ed25519 key " + fingerprint));
    CHECK(connection->close_reason().find("accept-new") != std::string::npos);
  }

  SUBCASE("accept-new records an unknown key, then refuses a changed one with file:line") {
    write_text(known_hosts, "# first line is a comment\n");
    options.host_key_policy = HostKeyPolicy::accept_new;
    {
      SshTransport transport(options);
      auto connection = connect(transport, h1.ip);
      CHECK(run_to_end(*connection) == "ran\n");
      CHECK(connection->info().host_key_status.find("recorded") == 0);
      CHECK(connection->take_diagnostics().find("recorded new host key ssh-ed25519 " + fingerprint) != std::string::npos);
    }
    std::string recorded = TestCluster::read_text(known_hosts);
    CHECK(recorded.find(h1.ip + " ssh-ed25519 ") != std::string::npos);
    {
      SshTransport transport(options);
      auto connection = connect(transport, h1.ip);
      CHECK(run_to_end(*connection) == "ran\n");
      CHECK(connection->info().host_key_status == "known (" + known_hosts + ":2)");
    }
    REQUIRE(cluster.rekey(1).status == 0);
    std::string new_fingerprint = fingerprint_of(h1.dir + "/ssh_host_ed25519_key.pub");
    REQUIRE(new_fingerprint != fingerprint);
    SshTransport transport(options);
    auto connection = connect(transport, h1.ip);
    CHECK(run_to_end(*connection).empty());
    INFO(connection->close_reason());
    CHECK(starts_with(connection->close_reason(), h1.ip + ": host key changed: " + h1.ip + ":22 presented ssh-ed25519 key " + new_fingerprint));
    CHECK(connection->close_reason().find("remove line 2 of " + known_hosts) != std::string::npos);
    CHECK(TestCluster::read_text(known_hosts) == recorded);  // a changed key is never recorded
  }

  SUBCASE("a bad line does not disable checking; hashed and [host]:port entries work") {
    const ClusterHost& h2 = cluster.host(2);
    // h2's key listed for h1: a mismatch that must be found past the garbage on line 1.
    write_text(known_hosts, "garbage-without-a-key\n"
                            "@cert-authority *.example ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIJ\n" +
                                host_key_line(cluster, 2, h1.ip));
    SshTransport transport(options);
    auto connection = connect(transport, h1.ip);
    CHECK(run_to_end(*connection).empty());
    INFO(connection->close_reason());
    CHECK(connection->close_reason().find("host key changed") != std::string::npos);
    CHECK(connection->close_reason().find("line 3 of") != std::string::npos);
    CHECK(connection->take_diagnostics().find(known_hosts + ":1: line not understood") != std::string::npos);

    // Hashed entries (ssh-keygen -H), for a name and for [ip]:2222.
    write_text(known_hosts, host_key_line(cluster, 2, h2.name) + host_key_line(cluster, 1, "[" + h1.ip + "]:2222"));
    REQUIRE(run_command({"ssh-keygen", "-q", "-H", "-f", known_hosts}).status == 0);
    std::string hashed_lines = TestCluster::read_text(known_hosts);
    CHECK(hashed_lines.find(h2.name) == std::string::npos);
    CHECK(hashed_lines.find("|1|") == 0);
    write_text(known_hosts, "oops\n" + hashed_lines);  // ssh-keygen -H refuses files with bad lines
    auto hashed = connect(transport, h2.name);
    CHECK(run_to_end(*hashed) == "ran\n");
    CHECK(hashed->info().host_key_status == "known (" + known_hosts + ":2)");
    auto other_port = connect(transport, h1.ip, 2222);
    CHECK(run_to_end(*other_port) == "ran\n");
    // The [ip]:2222 entry does not vouch for port 22 (as in OpenSSH).
    auto port_22 = connect(transport, h1.ip, 22);
    run_to_end(*port_22);
    CHECK(port_22->close_reason().find("host key unknown") != std::string::npos);
  }

  SUBCASE("insecure connects without known_hosts and warns") {
    write_text(known_hosts, "");
    options.host_key_policy = HostKeyPolicy::insecure;
    SshTransport transport(options);
    auto connection = connect(transport, h1.ip);
    CHECK(run_to_end(*connection) == "ran\n");
    CHECK(connection->take_diagnostics().find("WARNING: " + h1.ip + ": host key not checked") != std::string::npos);
    CHECK(TestCluster::read_text(known_hosts).empty());
  }
  REQUIRE_HOSTS_CLEAN(cluster);
}

TEST_CASE("ssh transport: authentication errors say what was tried and why") {
  TestCluster cluster(1);
  DTRAIN_REQUIRE_CLUSTER(cluster);
  InControlNamespace in_ctl(cluster);
  std::string dir = cluster.state_dir();
  REQUIRE(run_command({"ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", dir + "/stranger"}).status == 0);
  REQUIRE(run_command({"ssh-keygen", "-q", "-t", "rsa", "-b", "2048", "-N", "", "-f", dir + "/old_rsa"}).status == 0);
  REQUIRE(run_command({"ssh-keygen", "-q", "-t", "ed25519", "-N", "secret", "-f", dir + "/locked"}).status == 0);
  SshOptions options = cluster_options(cluster);
  options.remote_command = "true";
  options.identity_files = {dir + "/stranger", dir + "/old_rsa", dir + "/locked", dir + "/missing"};
  SshTransport transport(options);
  auto connection = connect(transport, cluster.host(1).ip);
  run_to_end(*connection);
  const std::string& reason = connection->close_reason();
  INFO(reason);
  CHECK(connection->failed());
  CHECK(starts_with(reason, cluster.host(1).ip + ": authentication failed for user '" + cluster.user() + "'"));
  CHECK(reason.find("tried " + dir + "/stranger (refused)") != std::string::npos);
  CHECK(reason.find(dir + "/old_rsa (RSA: RSA keys cannot work here") != std::string::npos);
  CHECK(reason.find(dir + "/locked (encrypted") != std::string::npos);
  CHECK(reason.find(dir + "/missing (cannot read") != std::string::npos);
  CHECK(reason.find("fix: authorize your public key") != std::string::npos);

  // The right key after the wrong one: the second identity wins.
  options.identity_files = {dir + "/stranger", cluster.key_path()};
  SshTransport second(options);
  auto ok = connect(second, cluster.host(1).ip);
  run_to_end(*ok);
  CHECK(ok->exit_code() == 0);
  CHECK(ok->info().auth_method == cluster.key_path());
  REQUIRE_HOSTS_CLEAN(cluster);
}

TEST_CASE("ssh transport: an unreachable host fails within the connect timeout, others unaffected") {
  TestCluster cluster(3);
  DTRAIN_REQUIRE_CLUSTER(cluster);
  InControlNamespace in_ctl(cluster);
  REQUIRE(cluster.partition(2).status == 0);
  REQUIRE(cluster.kill(3).status == 0);
  SshOptions options = cluster_options(cluster);
  options.connect_timeout = Millis(1500);
  options.remote_command = "echo up";
  SshTransport transport(options);
  auto good = connect(transport, cluster.host(1).ip);
  auto cut = connect(transport, cluster.host(2).ip);
  auto dead = connect(transport, cluster.host(3).ip);
  std::string good_out;
  auto start = std::chrono::steady_clock::now();
  bool good_done_first = false;
  REQUIRE(drive({good.get(), cut.get(), dead.get()}, [&] {
    good_out += good->take_received();
    if (good->closed() && !cut->closed()) good_done_first = true;
    return good->closed() && cut->closed() && dead->closed();
  }));
  auto took = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start);
  CHECK(good_out == "up\n");
  CHECK(good_done_first);
  CHECK(cut->failed());
  CHECK(cut->close_reason() == cluster.host(2).ip + ": connect to " + cluster.host(2).ip +
                                   ":22 timed out after 1.5s; fix: is " + cluster.host(2).ip +
                                   " up and reachable from here (firewall, partition)? ssh.connect_timeout is 1.5s");
  CHECK(dead->close_reason().find("connect to " + cluster.host(3).ip + ":22 failed: Connection refused") != std::string::npos);
  CHECK(took.count() < 10 * 1500);  // bounded by the timeout, not by TCP's minutes-long retries
  MESSAGE("all three settled in " << took.count() << " ms (connect timeout 1500 ms)");
  REQUIRE(cluster.heal(2).status == 0);
  REQUIRE(cluster.restart(3).status == 0);
  REQUIRE_HOSTS_CLEAN(cluster);
}

TEST_CASE("ssh transport: the remote path and arguments arrive unchanged, however hostile") {
  TestCluster cluster(1);
  DTRAIN_REQUIRE_CLUSTER(cluster);
  InControlNamespace in_ctl(cluster);
  // The host's /tmp is <host dir>/tmp seen from here.
  std::string hostile_dir = "/tmp/d x'y\"z$(touch PWNED);`id`|&<>\\ \n end";
  std::string local_dir = cluster.host(1).dir + "/tmp" + hostile_dir.substr(4);
  REQUIRE(::mkdir(local_dir.c_str(), 0755) == 0);
  write_text(local_dir + "/fake dtrain", "#!/bin/sh\nprintf '%s\\0' \"$0\" \"$@\"\n");
  REQUIRE(::chmod((local_dir + "/fake dtrain").c_str(), 0755) == 0);

  SshOptions options = cluster_options(cluster);
  options.remote_dtrain = hostile_dir + "/fake dtrain";
  options.agent_args = {"agent", "two words", "$HOME", "'single'", "\"double\"", "a;b", "`id`", "$(id)",
                        "line1\nline2", "back\\slash", "", "*"};
  SshTransport transport(options);
  auto connection = connect(transport, cluster.host(1).ip);
  std::string out = run_to_end(*connection);
  INFO(connection->close_reason());
  std::vector<std::string> expected{options.remote_dtrain};
  expected.insert(expected.end(), options.agent_args.begin(), options.agent_args.end());
  std::vector<std::string> got = split(out, '\0');
  if (!got.empty() && got.back().empty()) got.pop_back();
  CHECK(got == expected);
  CHECK(connection->exit_code() == 0);
  CHECK(run_command({"sh", "-c", "find " + shell_quote(cluster.host(1).dir) + " -name PWNED | grep -q ."}).status != 0);
  REQUIRE_HOSTS_CLEAN(cluster);
}

TEST_CASE("ssh transport: provisioning copies dtrain to a host that lacks it, then reuses it") {
  TestCluster cluster(2);
  DTRAIN_REQUIRE_CLUSTER(cluster);
  InControlNamespace in_ctl(cluster);
  SshOptions options = cluster_options(cluster);
  options.agent_args = {"--version"};  // what runs after provisioning: proves the copy works
  SshTransport transport(options);
  auto first = connect(transport, cluster.host(1).ip);
  auto second = connect(transport, cluster.host(2).ip);
  std::string out1, out2;
  REQUIRE(drive({first.get(), second.get()}, [&] {
    out1 += first->take_received();
    out2 += second->take_received();
    return first->closed() && second->closed();
  }, 60000));
  INFO(first->close_reason());
  CHECK(out1 == std::string("dtrain ") + kVersion + "\n");
  CHECK(out2 == out1);
  CHECK(starts_with(first->info().provisioning, "copied "));
  CHECK(first->info().remote_dtrain == "/root/.cache/dtrain/" + std::string(kVersion) + "/dtrain");
  MESSAGE("provisioning: " << first->info().provisioning << "; " << second->info().provisioning);

  std::string copied = cluster.host(1).home() + "/.cache/dtrain/" + kVersion + "/dtrain";
  struct stat info {};
  REQUIRE(::stat(copied.c_str(), &info) == 0);
  CHECK((info.st_mode & 0777) == 0755);
  CHECK(sha256_hex(*read_file(copied)) == sha256_hex(*read_file(DTRAIN_EXE)));
  CHECK(run_command({"sh", "-c", "ls " + shell_quote(cluster.host(1).home() + "/.cache/dtrain/" + kVersion)}).output == "dtrain\n");

  auto again = connect(transport, cluster.host(1).ip);
  CHECK(run_to_end(*again) == out1);
  CHECK(again->info().provisioning == "cached");

  // A stale binary of the same version (a different build) is replaced, not trusted.
  write_text(copied, "#!/bin/sh\necho stale\n");
  auto replaced = connect(transport, cluster.host(1).ip);
  CHECK(run_to_end(*replaced, 60000) == out1);
  CHECK(starts_with(replaced->info().provisioning, "copied "));

  // ssh.remote_dtrain pointing nowhere: a clear exit-127 message, no provisioning.
  options.remote_dtrain = "/nonexistent/dtrain";
  SshTransport pinned(options);
  auto missing = connect(pinned, cluster.host(2).ip);
  run_to_end(*missing);
  CHECK(missing->close_reason().find("exited with code 127 (/nonexistent/dtrain not found on the host") != std::string::npos);
  REQUIRE_HOSTS_CLEAN(cluster);
}

TEST_CASE("ssh transport: dtrain agent over a real SSH channel answers config with hello") {
  TestCluster cluster(1);
  DTRAIN_REQUIRE_CLUSTER(cluster);
  InControlNamespace in_ctl(cluster);
  SshOptions options = cluster_options(cluster);
  options.remote_dtrain = DTRAIN_EXE;  // the build tree is visible on the test hosts
  SshTransport transport(options);
  auto connection = connect(transport, cluster.host(1).ip);
  nlohmann::json config = {{"type", "config"}, {"protocol", 1}, {"run_id", "ssh-test"},
                           {"host", cluster.host(1).name}, {"runtime_dir", "/tmp/dtrain-0/sshtest"},
                           {"heartbeat_interval_ms", 1000}, {"heartbeat_timeout_ms", 10000},
                           {"supervisor_time_ms", 0}};
  connection->send(proto::encode_frame(config));
  proto::FrameDecoder decoder;
  std::optional<nlohmann::json> hello;
  std::string diagnostics;
  drive({connection.get()}, [&] {
    decoder.feed(connection->take_received());
    diagnostics += connection->take_diagnostics();
    auto next = decoder.next();
    if (next.ok() && next->has_value()) hello = **next;
    return hello.has_value() || connection->closed() || !next.ok();
  });
  INFO(connection->close_reason() << " / " << diagnostics);
  REQUIRE(hello.has_value());
  CHECK((*hello)["type"] == "hello");
  CHECK((*hello)["version"] == kVersion);
  // Closing stdin makes the agent fence and exit: nothing stays on the host.
  connection->shutdown(5000);
  CHECK(connection->closed());
  REQUIRE_HOSTS_CLEAN(cluster);
}
