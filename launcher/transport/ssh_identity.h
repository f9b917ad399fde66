#pragma once
// What an identity (private key) file holds, read without libssh2, so that the SSH transport can
// explain instead of failing opaquely: an RSA key cannot work (libssh2 1.10 signs with SHA-1,
// which OpenSSH 9.2 refuses; ssh.client: openssh can use it), an encrypted key needs ssh-agent (dtrain never prompts).

#include <string>

namespace dtrain::transport {

struct IdentityFile {
  std::string path;
  bool readable = false;
  std::string error;       ///< why not readable: "No such file or directory"
  std::string key_type;    ///< "ssh-ed25519", "ecdsa-sha2-nistp256", "ssh-rsa", ...; "" unknown
  bool encrypted = false;  ///< protected by a passphrase
  bool is_rsa() const { return key_type == "ssh-rsa"; }
};

/// Inspects an OpenSSH ("BEGIN OPENSSH PRIVATE KEY") or PEM private key file.
IdentityFile inspect_identity_file(const std::string& path);

/// Why RSA keys are skipped, and what to do instead (one sentence, for error messages).
inline constexpr const char* kRsaExplanation =
    "RSA keys cannot work here: the built-in client (libssh2 1.10, Debian 12) signs only with SHA-1 "
    "(ssh-rsa; rsa-sha2-256/512 came in libssh2 1.11), which OpenSSH 8.8 and later refuse; set "
    "ssh.client: openssh to use it, or create an ed25519 key (ssh-keygen -t ed25519) and authorize it on the hosts";

}  // namespace dtrain::transport
