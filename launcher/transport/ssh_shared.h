#pragma once
// What the SSH connections of one transport share (options with defaults filled in, the
// setup-slot count, the binary to provision), for the parts of SshConnection:
// ssh_transport.cpp (connect, run, deadlines, teardown), ssh_login.cpp (handshake, host key,
// authentication) and ssh_provision.cpp (probe, copy, start the agent). Not a public header.

#include <mutex>
#include <string>
#include <vector>

#include <libssh2.h>
#include <pwd.h>
#include <unistd.h>

#include "launcher/base/clock.h"
#include "launcher/base/strings.h"
#include "launcher/base/version.h"
#include "launcher/transport/agent_binary.h"
#include "launcher/transport/ssh_transport.h"

namespace dtrain::transport {

/// $HOME, else the password database's home, else "/".
inline std::string ssh_home_directory() {
  if (const char* home = std::getenv("HOME"); home && *home) return home;
  if (const passwd* entry = ::getpwuid(::geteuid())) return entry->pw_dir;
  return "/";
}

class SshShared {
 public:
  explicit SshShared(SshOptions opts) : options(std::move(opts)) {
    static std::once_flag init_once;
    std::call_once(init_once, [] { libssh2_init(0); });
    if (options.version.empty()) options.version = kVersion;
    // Specs say "~/.ssh/id_ed25519"; no shell expands it for us.
    auto expand = [](std::string& path) {
      if (path == "~" || starts_with(path, "~/")) path = ssh_home_directory() + path.substr(1);
    };
    expand(options.known_hosts);
    for (std::string& path : options.identity_files) expand(path);
    if (options.known_hosts.empty()) options.known_hosts = ssh_home_directory() + "/.ssh/known_hosts";
    known_hosts_list.push_back(options.known_hosts);
    for (const std::string& global : options.global_known_hosts) known_hosts_list.push_back(global);
    if (options.identity_files.empty()) {
      explicit_identities = false;
      for (const char* name : {"id_ed25519", "id_ecdsa", "id_rsa"}) {
        options.identity_files.push_back(ssh_home_directory() + "/.ssh/" + name);
      }
    }
    if (options.max_parallel < 1) options.max_parallel = 1;
  }

  const Clock& clock() const { return options.clock ? *options.clock : system_clock; }

  /// Where host keys are looked up, in order: the user's file, then the global ones.
  const std::vector<std::string>& known_hosts_files() const { return known_hosts_list; }

  SshOptions options;
  bool explicit_identities = true;
  SystemClock system_clock;
  int in_setup = 0;
  std::string os = local_os();
  AgentBinary binary{options.local_binary};
  std::vector<std::string> known_hosts_list;
};

}  // namespace dtrain::transport
