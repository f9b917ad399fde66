#pragma once
// known_hosts checking for the SSH transport, OpenSSH-compatible where it matters: the file is
// read LINE BY LINE (libssh2_knownhost_readfile gives up on the whole file at the first line it
// cannot parse, which would silently disable checking), hashed entries (|1|salt|hash) and
// [host]:port entries work, @revoked keys are refused, and every verdict carries the line
// number so that a changed key can be fixed by hand.

#include <string>
#include <string_view>
#include <vector>

#include "launcher/base/result.h"

struct _LIBSSH2_SESSION;

namespace dtrain::transport {

enum class KnownHostVerdict {
  match,      ///< a line for this host has exactly this key
  mismatch,   ///< lines for this host and key type exist, none with this key: refuse
  not_found,  ///< no line for this host and key type
  revoked,    ///< the key is listed under @revoked
};

struct KnownHostCheck {
  KnownHostVerdict verdict = KnownHostVerdict::not_found;
  int line = 0;                       ///< 1-based line of the match/mismatch/revocation
  std::vector<std::string> warnings;  ///< "known_hosts:5: line not understood; ignored"
};

/// The name known_hosts uses for host:port: "gpu01" for port 22, "[gpu01]:2222" otherwise.
std::string known_hosts_name(const std::string& host, int port);

/// Checks `key_blob` (raw, as libssh2_session_hostkey returns it) of type `knownhost_key_type`
/// (a LIBSSH2_KNOWNHOST_KEY_* value) for host:port against the file at `path`. A missing file
/// is an empty one. `session` is any libssh2 session (libssh2 allocates through it).
Result<KnownHostCheck> check_known_host(_LIBSSH2_SESSION* session, const std::string& path,
                                        const std::string& host, int port,
                                        std::string_view key_blob, int knownhost_key_type);

/// The key types (LIBSSH2_KNOWNHOST_KEY_*) the file holds for host:port, in file order; used to
/// prefer those host key algorithms in the handshake, as OpenSSH does.
std::vector<int> known_key_types(_LIBSSH2_SESSION* session, const std::string& path,
                                 const std::string& host, int port);

/// Appends "<host> <key type> <base64 key>" (accept-new), creating the file (0600) and its
/// directory (0700) when missing.
Status append_known_host(const std::string& path, const std::string& host, int port,
                         const std::string& key_type_name, std::string_view key_blob);

}  // namespace dtrain::transport
