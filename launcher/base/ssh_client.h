#pragma once
// Which SSH client reaches remote hosts (spec: ssh.client): one type for the spec and the
// transports, as HostKeyPolicy is.

namespace dtrain {

enum class SshClient {
  libssh2,  ///< built in (default): known_hosts and keys only, no ssh_config
  openssh,  ///< the system's `ssh`: ssh_config, ProxyJump, certificates, ControlMaster, Kerberos
};

/// "libssh2", "openssh": as written in a spec.
inline const char* to_string(SshClient client) { return client == SshClient::openssh ? "openssh" : "libssh2"; }

}  // namespace dtrain
