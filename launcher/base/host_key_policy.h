#pragma once
// How SSH host keys are checked: the spec's ssh.host_key_policy and the transport's option are
// this one type, so no mapping between two copies can drift.

namespace dtrain {

enum class HostKeyPolicy {
  strict,      ///< the key must already be in known_hosts (default)
  accept_new,  ///< record unknown keys, refuse changed ones (OpenSSH's StrictHostKeyChecking=accept-new)
  insecure,    ///< no check at all; warned at every connection
};

/// "strict", "accept-new", "insecure": as written in a spec.
inline const char* to_string(HostKeyPolicy policy) {
  switch (policy) {
    case HostKeyPolicy::strict: return "strict";
    case HostKeyPolicy::accept_new: return "accept-new";
    case HostKeyPolicy::insecure: return "insecure";
  }
  return "strict";
}

}  // namespace dtrain
