// SshConnection's handshake, host key check and authentication (ssh-agent, then identity
// files): from a connected socket to an authenticated session (ssh_transport.h).

#include <libssh2.h>

#include <algorithm>
#include <cstring>

#include "launcher/base/strings.h"
#include "launcher/transport/ssh_digest.h"
#include "launcher/transport/ssh_identity.h"
#include "launcher/transport/ssh_known_hosts.h"
#include "launcher/transport/ssh_shared.h"

namespace dtrain::transport {
namespace {

struct HostKeyKind {
  int libssh2_type;
  const char* name;  // as in known_hosts and host key algorithm lists
};
// Plain keys only: libssh2 1.10 cannot check host certificates (see ssh_known_hosts.h). RSA
// works only with ssh-rsa (SHA-1) signatures: Debian 12's libssh2 1.10.0 has no rsa-sha2-256/512
// (they came in 1.11), and OpenSSH 8.8+ servers no longer offer ssh-rsa, so a host with only an
// RSA key needs ssh.client: openssh.
constexpr HostKeyKind kHostKeyKinds[] = {
    {LIBSSH2_HOSTKEY_TYPE_ED25519, "ssh-ed25519"},
    {LIBSSH2_HOSTKEY_TYPE_ECDSA_256, "ecdsa-sha2-nistp256"},
    {LIBSSH2_HOSTKEY_TYPE_ECDSA_384, "ecdsa-sha2-nistp384"},
    {LIBSSH2_HOSTKEY_TYPE_ECDSA_521, "ecdsa-sha2-nistp521"},
    {LIBSSH2_HOSTKEY_TYPE_RSA, "ssh-rsa"},
};

}  // namespace

bool SshConnection::step_handshake() {
  if (!session_) {
    session_ = libssh2_session_init();
    if (!session_) {
      close_with(target_.host + ": handshake: internal bug: libssh2_session_init failed", true);
      return true;
    }
    libssh2_session_set_blocking(session_, 0);
    // Prefer the key types known_hosts already holds for this host, as OpenSSH does; else
    // ed25519 first (what OpenSSH records by default).
    std::vector<std::string> order;
    for (const std::string& known : known_key_types(shared_->known_hosts_files(), target_.host, target_.port)) {
      for (const HostKeyKind& kind : kHostKeyKinds) {
        if (kind.name == known) order.push_back(kind.name);
      }
    }
    for (const HostKeyKind& kind : kHostKeyKinds) {
      if (std::find(order.begin(), order.end(), kind.name) == order.end()) order.push_back(kind.name);
    }
    libssh2_session_method_pref(session_, LIBSSH2_METHOD_HOSTKEY, join(order, ",").c_str());
    libssh2_keepalive_config(session_, 1, 15);
  }
  int rc = libssh2_session_handshake(session_, socket_fd_);
  if (rc == LIBSSH2_ERROR_EAGAIN) return false;
  if (rc != 0) {
    std::string message = target_.host + ": SSH handshake with " + info_.address + " failed: " + libssh2_error() +
                          "; fix: check that port " + std::to_string(target_.port) + " on " + target_.host +
                          " is an SSH server";
    std::string authority = covering_cert_authority(shared_->known_hosts_files(), target_.host, target_.port);
    if (rc == LIBSSH2_ERROR_KEX_FAILURE && !authority.empty()) {
      message += "; " + authority + " trusts a certificate authority for this host: if it presents only a host "
                 "certificate, the built-in client (libssh2 1.10, no certificate support) cannot connect: set "
                 "ssh.client: openssh";
    }
    close_with(message, true);
    return true;
  }
  if (!verify_host_key()) return true;
  phase_ = SshPhase::authenticating;
  return true;
}

bool SshConnection::verify_host_key() {
  const SshOptions& options = shared_->options;
  size_t key_length = 0;
  int key_type = 0;
  const char* key = libssh2_session_hostkey(session_, &key_length, &key_type);
  if (!key) {
    close_with(target_.host + ": host key: the server sent none: " + libssh2_error(), true);
    return false;
  }
  std::string_view blob(key, key_length);
  const HostKeyKind* kind = nullptr;
  for (const HostKeyKind& candidate : kHostKeyKinds) {
    if (candidate.libssh2_type == key_type) kind = &candidate;
  }
  info_.host_key_type = kind ? kind->name : "unknown";
  // libssh2 hashes the key it was given: the fingerprint is of exactly the key it checks.
  const char* digest = libssh2_hostkey_hash(session_, LIBSSH2_HOSTKEY_HASH_SHA256);
  info_.host_key_fingerprint = digest ? openssh_fingerprint_of_digest(std::string_view(digest, 32))
                                      : openssh_fingerprint(blob);
  std::string presented = info_.address + " presented " + info_.host_key_type + " key " + info_.host_key_fingerprint;
  if (options.host_key_policy == HostKeyPolicy::insecure) {
    info_.host_key_status = "NOT CHECKED (host_key_policy: insecure)";
    diagnostics_ += "dtrain: WARNING: " + target_.host + ": host key not checked (ssh.host_key_policy: insecure); " +
                    presented + "\n";
    return true;
  }
  if (!kind) {
    close_with(target_.host + ": host key: " + presented + " of a type dtrain cannot check", true);
    return false;
  }
  auto check = check_known_host(shared_->known_hosts_files(), target_.host, target_.port, blob, kind->name);
  if (!check) {
    close_with(target_.host + ": host key: " + check.error().message, true);
    return false;
  }
  for (const std::string& warning : check->warnings) diagnostics_ += "dtrain: warning: " + warning + "\n";
  std::string where = check->where();
  std::string name = known_hosts_name(target_.host, target_.port);
  std::string files = join(shared_->known_hosts_files(), ", ");
  switch (check->verdict) {
    case KnownHostVerdict::match:
      info_.host_key_status = "known (" + where + ")";
      return true;
    case KnownHostVerdict::revoked:
      close_with(target_.host + ": host key revoked: " + presented + ", which " + where +
                     " marks @revoked; refusing to connect; fix: ask the host's administrator for its new key",
                 true);
      return false;
    case KnownHostVerdict::mismatch:
      close_with(target_.host + ": host key changed: " + presented + ", but line " + std::to_string(check->line) +
                     " of " + check->file + " holds a different " + info_.host_key_type + " key for '" +
                     name + "'; this may be an attack, or the host was reinstalled; refusing to connect; fix: "
                     "remove line " + std::to_string(check->line) + " of " + check->file +
                     " if the change is expected (ssh-keygen -R " + shell_quote(name) + " -f " +
                     shell_quote(check->file) + ") and connect again",
                 true);
      return false;
    case KnownHostVerdict::not_found:
      if (!check->cert_authority.empty()) {
        // The site vouches for its hosts by certificate. Recording (or trusting) the plain key
        // would bypass that, and libssh2 1.10 cannot check a certificate: refuse, and say who can.
        close_with(target_.host + ": host key not verifiable here: " + presented + "; " + check->cert_authority +
                       " trusts a certificate authority (@cert-authority) for this host, but the built-in SSH "
                       "client (libssh2 1.10) cannot check host certificates, and no plain key for the host is in " +
                       files + "; refusing to connect; fix: set ssh.client: openssh (the system's ssh checks the "
                       "certificate), or add the host's key to " + options.known_hosts,
                   true);
        return false;
      }
      if (options.host_key_policy == HostKeyPolicy::accept_new) {
        Status recorded = append_known_host(options.known_hosts, target_.host, target_.port, kind->name, blob);
        if (!recorded) {
          close_with(target_.host + ": host key: " + recorded.error().message, true);
          return false;
        }
        info_.host_key_status = "recorded in " + options.known_hosts + " (accept-new)";
        diagnostics_ += "dtrain: " + target_.host + ": recorded new host key " + info_.host_key_type + " " +
                        info_.host_key_fingerprint + " in " + options.known_hosts + " (accept-new)\n";
        return true;
      }
      close_with(target_.host + ": host key unknown: " + presented + ", which is not in " + files +
                     " (ssh.host_key_policy: strict); fix: check the fingerprint and add the key (ssh-keyscan -p " +
                     std::to_string(target_.port) + " " + shell_quote(target_.host) + " >> " +
                     shell_quote(options.known_hosts) + ", or connect once with ssh), or set "
                     "ssh.host_key_policy: accept-new",
                 true);
      return false;
  }
  return false;
}

bool SshConnection::step_authenticate() {
  const SshOptions& options = shared_->options;
  const std::string& user = target_.user;
  auto user_length = static_cast<unsigned int>(user.size());
  auto authenticated = [&](std::string method) {
    info_.auth_method = std::move(method);
    info_.ready_ms = since_start();
    if (agent_) {
      libssh2_agent_disconnect(agent_);
      libssh2_agent_free(agent_);
      agent_ = nullptr;
    }
    start_remote();
    return true;
  };

  if (!auth_listed_) {
    char* methods = libssh2_userauth_list(session_, user.c_str(), user_length);
    if (!methods) {
      if (libssh2_userauth_authenticated(session_)) return authenticated("none");
      if (libssh2_session_last_errno(session_) == LIBSSH2_ERROR_EAGAIN) return false;
      close_with(target_.host + ": authentication: cannot list methods for user '" + user + "': " + libssh2_error(), true);
      return true;
    }
    auth_listed_ = true;
    if (!std::strstr(methods, "publickey")) {
      close_with(target_.host + ": authentication: the server offers only '" + std::string(methods) + "' to user '" +
                     user + "'; dtrain authenticates with keys only; fix: enable PubkeyAuthentication in sshd_config on " +
                     target_.host,
                 true);
      return true;
    }
  }

  // 1. ssh-agent.
  const char* agent_socket = std::getenv("SSH_AUTH_SOCK");
  if (!agent_done_ && (!options.use_agent || !agent_socket || !*agent_socket)) agent_done_ = true;
  if (!agent_done_) {
    if (!agent_) {
      agent_ = libssh2_agent_init(session_);
      if (!agent_ || libssh2_agent_connect(agent_) != 0 || libssh2_agent_list_identities(agent_) != 0) {
        auth_tried_.push_back("ssh-agent (" + std::string(agent_socket) + " not usable)");
        agent_done_ = true;
        return true;
      }
    }
    if (!agent_identity_) {
      int rc = libssh2_agent_get_identity(agent_, &agent_identity_, agent_previous_);
      if (rc != 0) {  // 1: no more keys; <0: error
        auth_tried_.push_back("ssh-agent (" + std::to_string(agent_keys_tried_) + " keys refused)");
        agent_done_ = true;
        agent_identity_ = nullptr;
        return true;
      }
    }
    int rc = libssh2_agent_userauth(agent_, user.c_str(), agent_identity_);
    if (rc == LIBSSH2_ERROR_EAGAIN) return false;
    if (rc == 0) {
      std::string comment = agent_identity_->comment ? agent_identity_->comment : "";
      return authenticated("ssh-agent" + (comment.empty() ? "" : " (" + comment + ")"));
    }
    ++agent_keys_tried_;
    agent_previous_ = agent_identity_;
    agent_identity_ = nullptr;
    return true;
  }

  // 2. Identity files.
  while (identity_index_ < options.identity_files.size()) {
    const std::string& path = options.identity_files[identity_index_];
    if (!identity_checked_) {
      IdentityFile identity = inspect_identity_file(path);
      std::string skip;
      if (!identity.readable) {
        if (shared_->explicit_identities) skip = path + " (cannot read: " + identity.error + ")";
      } else if (identity.is_rsa()) {
        skip = path + " (RSA: " + kRsaExplanation + ")";
      } else if (identity.encrypted) {
        skip = path + " (encrypted; dtrain never prompts: load it into ssh-agent with ssh-add " + shell_quote(path) + ")";
      }
      if (!identity.readable || !skip.empty()) {
        if (!skip.empty()) auth_skipped_.push_back(skip);
        ++identity_index_;
        continue;
      }
      identity_checked_ = true;
    }
    int rc = libssh2_userauth_publickey_fromfile_ex(session_, user.c_str(), user_length, nullptr, path.c_str(), nullptr);
    if (rc == LIBSSH2_ERROR_EAGAIN) return false;
    if (rc == 0) return authenticated(path);
    auth_tried_.push_back(path + (rc == LIBSSH2_ERROR_FILE || rc == LIBSSH2_ERROR_PUBLICKEY_UNVERIFIED
                                      ? " (unusable: " + libssh2_error() + ")"
                                      : " (refused)"));
    ++identity_index_;
    identity_checked_ = false;
    return true;
  }

  std::string message = target_.host + ": authentication failed for user '" + user + "'";
  message += auth_tried_.empty() ? "; no key was tried" : "; tried " + join(auth_tried_, ", ");
  if (!auth_skipped_.empty()) message += "; skipped " + join(auth_skipped_, "; ");
  if (auth_tried_.empty() && auth_skipped_.empty()) {
    message += " (no ssh-agent, no key in " + ssh_home_directory() + "/.ssh)";
  }
  message += "; fix: authorize your public key on " + target_.host + " (ssh-copy-id -i KEY.pub " + user + "@" +
             target_.host + "), or set ssh.identity to a key that is (ed25519 or ECDSA)";
  close_with(message, true);
  return true;
}

}  // namespace dtrain::transport
