#pragma once
// known_hosts checking for the libssh2 client, as OpenSSH reads the files: several files in
// order (the user's known_hosts, then /etc/ssh/ssh_known_hosts and ssh_known_hosts2), read
// LINE BY LINE (one bad line is a warning, never the end of checking), host patterns with
// wildcards and negation ("*.gpu.example.com,!bad.gpu.example.com"), hashed entries
// (|1|salt|hash), [host]:port entries, @revoked keys refused, and @cert-authority lines
// recognised. Every verdict carries file and line so that a changed key can be fixed by hand.
//
// What libssh2 1.10 cannot check: host certificates. It negotiates only plain host key
// algorithms and cannot verify a certificate's CA signature, so a @cert-authority line cannot
// vouch for a host here; check_known_host() reports the line that would have (cert_authority),
// and the transport refuses such a host with a pointer to ssh.client: openssh, which can.
// Parsing is plain text (no libssh2), so it is unit-tested without a session.

#include <string>
#include <string_view>
#include <vector>

#include "launcher/base/result.h"

namespace dtrain::transport {

enum class KnownHostMarker { none, revoked, cert_authority };

/// One usable line of a known_hosts file.
struct KnownHostEntry {
  int line = 0;                  ///< 1-based
  KnownHostMarker marker = KnownHostMarker::none;
  std::string patterns;          ///< the host field as written: "a,b", "*.x", "|1|salt|hash"
  std::string key_type;          ///< "ssh-ed25519"
  std::string key_blob;          ///< decoded public key
};

struct KnownHostsFile {
  std::string path;
  std::vector<KnownHostEntry> entries;
  std::vector<std::string> warnings;  ///< "path:5: line not understood; ignored ..."
};

/// Parses known_hosts text; `path` names it in warnings.
KnownHostsFile parse_known_hosts(std::string_view text, const std::string& path);

/// Reads and parses a file; a missing file is an empty one (nothing known yet).
Result<KnownHostsFile> read_known_hosts(const std::string& path);

/// The name known_hosts uses for host:port: "gpu01" for port 22, "[gpu01]:2222" otherwise
/// (lowercase).
std::string known_hosts_name(const std::string& host, int port);

/// OpenSSH's host matching: `patterns` is a hashed entry or a comma list of wildcard patterns
/// (*, ?), any of them negated with '!'; a negated match wins over every positive one.
bool host_patterns_match(std::string_view patterns, const std::string& name);

enum class KnownHostVerdict {
  match,      ///< a line for this host has exactly this key
  mismatch,   ///< lines for this host and key type exist, none with this key: refuse
  not_found,  ///< no line for this host and key type
  revoked,    ///< the key is listed under @revoked
};

struct KnownHostCheck {
  KnownHostVerdict verdict = KnownHostVerdict::not_found;
  std::string file;                   ///< of the match/mismatch/revocation
  int line = 0;
  /// "file:line" of a @cert-authority line that covers this host ("" when none): the site
  /// vouches for the host by certificate, which libssh2 cannot check.
  std::string cert_authority;
  std::vector<std::string> warnings;
  std::string where() const { return file + ":" + std::to_string(line); }
};

/// Checks `key_blob` (raw) of type `key_type` ("ssh-ed25519") for host:port against `files` in
/// order, as OpenSSH does: a revoked key anywhere refuses; else a match anywhere accepts; else
/// the first line with another key of this type is a mismatch.
Result<KnownHostCheck> check_known_host(const std::vector<std::string>& files, const std::string& host, int port,
                                        std::string_view key_blob, const std::string& key_type);

/// The key types the files hold for host:port, in file order; used to prefer those host key
/// algorithms in the handshake, as OpenSSH does.
std::vector<std::string> known_key_types(const std::vector<std::string>& files, const std::string& host, int port);

/// "file:line" of the first @cert-authority line covering host:port, or "".
std::string covering_cert_authority(const std::vector<std::string>& files, const std::string& host, int port);

/// Appends "<host> <key type> <base64 key>" (accept-new), creating the file (0600) and its
/// directory (0700) when missing.
Status append_known_host(const std::string& path, const std::string& host, int port,
                         const std::string& key_type_name, std::string_view key_blob);

}  // namespace dtrain::transport
