// The openssh client's pure parts: the `ssh` command line a spec gives (host key policy, config,
// user, port, identities; nothing more, so ssh_config decides the rest), the explanations of
// ssh's failures, and the spec keys ssh.client / ssh.config with their round trip.

#include <doctest/doctest.h>

#include <algorithm>

#include "launcher/spec/spec_loader.h"
#include "launcher/transport/openssh_transport.h"

using namespace dtrain;
using namespace dtrain::transport;

namespace {

bool has_option(const std::vector<std::string>& argv, const std::string& value) {
  for (size_t i = 0; i + 1 < argv.size(); ++i) {
    if (argv[i] == "-o" && argv[i + 1] == value) return true;
  }
  return false;
}

bool has_pair(const std::vector<std::string>& argv, const std::string& flag, const std::string& value) {
  for (size_t i = 0; i + 1 < argv.size(); ++i) {
    if (argv[i] == flag && argv[i + 1] == value) return true;
  }
  return false;
}

}  // namespace

TEST_CASE("openssh arguments: batch mode, the host key policy, and only what the spec says") {
  SshOptions options;
  AgentTarget target;
  target.host = "gpu01";
  auto argv = openssh_arguments(options, target, "exec x");
  CHECK(argv.front() == "ssh");
  CHECK(argv[1] == "-T");
  CHECK(has_option(argv, "BatchMode=yes"));
  CHECK(has_option(argv, "StrictHostKeyChecking=yes"));
  CHECK(has_option(argv, "ConnectTimeout=10"));
  // No user, port, identity, config or known_hosts given: ssh_config decides them.
  for (const char* flag : {"-l", "-p", "-i", "-F"}) CHECK(std::find(argv.begin(), argv.end(), flag) == argv.end());
  CHECK(std::none_of(argv.begin(), argv.end(), [](const std::string& a) { return a.find("KnownHostsFile") != std::string::npos; }));
  // The host after "--": a host named like an option stays a host.
  REQUIRE(argv.size() >= 3);
  CHECK(argv[argv.size() - 3] == "--");
  CHECK(argv[argv.size() - 2] == "gpu01");
  CHECK(argv.back() == "exec x");

  options.host_key_policy = HostKeyPolicy::accept_new;
  options.openssh_config = "/etc/dtrain/ssh_config";
  options.known_hosts = "/site/known hosts";
  options.user = "alice";
  options.port = 2222;
  options.identity_files = {"/keys/id_ed25519"};
  options.connect_timeout = Millis(2500);
  argv = openssh_arguments(options, target, "exec x");
  CHECK(has_option(argv, "StrictHostKeyChecking=accept-new"));
  CHECK(has_pair(argv, "-F", "/etc/dtrain/ssh_config"));
  CHECK(has_option(argv, "UserKnownHostsFile=\"/site/known hosts\""));
  CHECK(has_pair(argv, "-l", "alice"));
  CHECK(has_pair(argv, "-p", "2222"));
  CHECK(has_pair(argv, "-i", "/keys/id_ed25519"));
  CHECK(has_option(argv, "ConnectTimeout=3"));

  // The host entry's user and port win over the ssh section's.
  target.user = "bob";
  target.port = 22022;
  argv = openssh_arguments(options, target, "exec x");
  CHECK(has_pair(argv, "-l", "bob"));
  CHECK(has_pair(argv, "-p", "22022"));

  options.host_key_policy = HostKeyPolicy::insecure;
  argv = openssh_arguments(options, target, "exec x");
  CHECK(has_option(argv, "StrictHostKeyChecking=no"));
  CHECK(has_option(argv, "UserKnownHostsFile=/dev/null"));
  CHECK(has_option(argv, "GlobalKnownHostsFile=/dev/null"));
  CHECK_FALSE(has_option(argv, "UserKnownHostsFile=\"/site/known hosts\""));
}

TEST_CASE("openssh failures are explained with the fix") {
  SshOptions options;
  std::string changed =
      "@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@\n"
      "@    WARNING: REMOTE HOST IDENTIFICATION HAS CHANGED!     @\n"
      "@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@\n"
      "IT IS POSSIBLE THAT SOMEONE IS DOING SOMETHING NASTY!\n"
      "Offending ED25519 key in /home/u/.ssh/known_hosts:7\n"
      "Host key for gpu01 has changed and you have requested strict checking.\n"
      "Host key verification failed.\n";
  std::string text = explain_openssh_failure("gpu01", changed, options);
  CHECK(text.find("gpu01: host key changed: OpenSSH refused it (Offending ED25519 key in /home/u/.ssh/known_hosts:7)") == 0);
  CHECK(text.find("ssh-keygen -R 'gpu01' -f '/home/u/.ssh/known_hosts'") != std::string::npos);

  text = explain_openssh_failure("gpu02", "No ED25519 host key is known for gpu02 and you have requested strict checking.\n"
                                          "Host key verification failed.\n", options);
  CHECK(text.find("gpu02: host key unknown or not verifiable: OpenSSH says 'No ED25519 host key is known") == 0);
  CHECK(text.find("accept-new") != std::string::npos);

  text = explain_openssh_failure("gpu03", "alice@gpu03: Permission denied (publickey).\n", options);
  CHECK(text.find("gpu03: authentication failed: ") == 0);
  CHECK(text.find("BatchMode=yes") != std::string::npos);

  text = explain_openssh_failure("gpu04", "ssh: Could not resolve hostname gpu04: Name or service not known\n", options);
  CHECK(text.find("gpu04: resolve: ") == 0);

  text = explain_openssh_failure("gpu05", "ssh: connect to host 10.0.0.5 port 22: Connection timed out\n", options);
  CHECK(text.find("gpu05: connect: ") == 0);
  CHECK(text.find("ProxyJump") != std::string::npos);

  text = explain_openssh_failure("gpu06", "", options);
  CHECK(text == "gpu06: ssh failed before the agent started: OpenSSH says nothing on stderr");
}

TEST_CASE("spec: ssh.client and ssh.config, with the round trip") {
  const char* worker = "worker:\n  command: [python3, train.py]\n";
  spec::LoadResult loaded = spec::parse_job_spec(std::string("version: 1\nssh:\n  client: openssh\n  config: /etc/site_ssh\n") +
                                                     worker, "job.yaml", ".", {});
  REQUIRE_MESSAGE(loaded.ok(), loaded.message());
  CHECK(loaded.spec->ssh.client == SshClient::openssh);
  CHECK(loaded.spec->ssh.config == "/etc/site_ssh");
  spec::LoadResult again = spec::parse_job_spec(spec::to_yaml(*loaded.spec), "spec.yaml", ".", {});
  REQUIRE_MESSAGE(again.ok(), again.message());
  CHECK(again.spec->ssh == loaded.spec->ssh);

  spec::LoadResult defaults = spec::parse_job_spec(std::string("version: 1\n") + worker, "job.yaml", ".", {});
  REQUIRE(defaults.ok());
  CHECK(defaults.spec->ssh.client == SshClient::libssh2);

  spec::LoadResult wrong = spec::parse_job_spec(std::string("version: 1\nssh:\n  client: putty\n") + worker, "job.yaml", ".", {});
  CHECK_FALSE(wrong.ok());
  CHECK(wrong.message().find("ssh.client") != std::string::npos);
  CHECK(wrong.message().find("openssh") != std::string::npos);

  spec::LoadResult config_without_openssh =
      spec::parse_job_spec(std::string("version: 1\nssh:\n  config: /etc/site_ssh\n") + worker, "job.yaml", ".", {});
  CHECK_FALSE(config_without_openssh.ok());
  CHECK(config_without_openssh.message().find("add ssh.client: openssh") != std::string::npos);
}
