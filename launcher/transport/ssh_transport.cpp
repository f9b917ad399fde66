#include "launcher/transport/ssh_transport.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <libssh2.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pwd.h>
#include <sys/socket.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <mutex>

#include "launcher/base/fd.h"
#include "launcher/base/strings.h"
#include "launcher/base/version.h"
#include "launcher/transport/agent_binary.h"
#include "launcher/transport/ssh_digest.h"
#include "launcher/transport/ssh_identity.h"
#include "launcher/transport/ssh_known_hosts.h"

namespace dtrain::transport {

const char* to_string(SshPhase phase) {
  switch (phase) {
    case SshPhase::queued: return "queued";
    case SshPhase::connecting: return "connect";
    case SshPhase::handshake: return "handshake";
    case SshPhase::authenticating: return "authentication";
    case SshPhase::probing: return "provisioning probe";
    case SshPhase::uploading: return "provisioning copy";
    case SshPhase::starting: return "exec";
    case SshPhase::running: return "running";
    case SshPhase::closed: return "closed";
  }
  return "?";
}

namespace {

std::string home_directory() {
  if (const char* home = std::getenv("HOME"); home && *home) return home;
  if (const passwd* entry = ::getpwuid(::geteuid())) return entry->pw_dir;
  return "/";
}

std::string current_user() {
  if (const passwd* entry = ::getpwuid(::geteuid())) return entry->pw_name;
  return "root";
}

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

/// What the probe prints, one "key value" per line (values may contain spaces).
std::string probe_command(const std::string& version) {
  return "v=" + shell_quote(version) +
         "; c=\"$HOME/.cache/dtrain/$v/dtrain\"\n"
         "echo \"os $(uname -s) $(uname -m)\"\n"
         "echo \"home $HOME\"\n"
         "if [ -x \"$c\" ]; then echo \"cache_sha $(sha256sum < \"$c\" | cut -c1-64)\"; fi\n"
         "p=$(command -v dtrain 2>/dev/null) && echo \"path_bin $p\" && "
         "echo \"path_version $(\"$p\" --version 2>/dev/null | head -n 1)\" && "
         "echo \"path_sha $(sha256sum < \"$p\" | cut -c1-64)\"\n"
         "exit 0\n";
}

/// Runs a script with /bin/sh whatever the user's login shell is (csh, fish, ...).
std::string posix_shell(const std::string& script) { return "exec /bin/sh -c " + shell_quote(script); }

std::string probe_value(const std::string& output, const std::string& key) {
  for (const std::string& line : split(output, '\n')) {
    if (starts_with(line, key + " ")) return line.substr(key.size() + 1);
  }
  return {};
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Shared by the connections of one transport.

class SshShared {
 public:
  explicit SshShared(SshOptions opts) : options(std::move(opts)) {
    static std::once_flag init_once;
    std::call_once(init_once, [] { libssh2_init(0); });
    if (options.version.empty()) options.version = kVersion;
    // Specs say "~/.ssh/id_ed25519"; no shell expands it for us.
    auto expand = [](std::string& path) {
      if (path == "~" || starts_with(path, "~/")) path = home_directory() + path.substr(1);
    };
    expand(options.known_hosts);
    for (std::string& path : options.identity_files) expand(path);
    if (options.known_hosts.empty()) options.known_hosts = home_directory() + "/.ssh/known_hosts";
    known_hosts_list.push_back(options.known_hosts);
    for (const std::string& global : options.global_known_hosts) known_hosts_list.push_back(global);
    if (options.identity_files.empty()) {
      explicit_identities = false;
      for (const char* name : {"id_ed25519", "id_ecdsa", "id_rsa"}) {
        options.identity_files.push_back(home_directory() + "/.ssh/" + name);
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

// ---------------------------------------------------------------------------------------------

SshConnection::SshConnection(std::shared_ptr<SshShared> shared, AgentTarget target)
    : shared_(std::move(shared)), target_(std::move(target)) {
  const SshOptions& options = shared_->options;
  if (target_.user.empty()) target_.user = options.user.empty() ? current_user() : options.user;
  if (target_.port <= 0) target_.port = options.port;
  info_.user = target_.user;
}

SshConnection::~SshConnection() { shutdown(0); }

int64_t SshConnection::now() const { return shared_->clock().monotonic_ms(); }

std::string SshConnection::describe() const {
  return target_.host + " (ssh " + target_.user + "@" +
         (info_.address.empty() ? target_.host + ":" + std::to_string(target_.port) : info_.address) + ")";
}

std::string SshConnection::local_address() const {
  if (socket_fd_ < 0 || phase_ == SshPhase::connecting || phase_ == SshPhase::queued) return {};
  sockaddr_storage address{};
  socklen_t length = sizeof address;
  if (::getsockname(socket_fd_, reinterpret_cast<sockaddr*>(&address), &length) != 0) return {};
  char text[INET6_ADDRSTRLEN] = {};
  const void* raw = address.ss_family == AF_INET6
                        ? static_cast<const void*>(&reinterpret_cast<const sockaddr_in6*>(&address)->sin6_addr)
                        : static_cast<const void*>(&reinterpret_cast<const sockaddr_in*>(&address)->sin_addr);
  if (::inet_ntop(address.ss_family, raw, text, sizeof text) == nullptr) return {};
  return text;
}

std::optional<int> SshConnection::exit_code() const {
  if (channel_role_ != ChannelRole::agent || !channel_) return std::nullopt;
  return channel_->exit_code();
}

std::string SshConnection::exit_signal() const {
  if (channel_role_ != ChannelRole::agent || !channel_) return {};
  return channel_->exit_signal();
}

std::string SshConnection::libssh2_error() const {
  if (!session_) return "no session";
  char* message = nullptr;
  int length = 0;
  libssh2_session_last_error(session_, &message, &length, 0);
  return message && length > 0 ? std::string(message, length) : std::string("unknown error");
}

std::vector<pollfd> SshConnection::poll_fds() const {
  if (socket_fd_ < 0 || phase_ == SshPhase::closed || phase_ == SshPhase::queued) return {};
  if (phase_ == SshPhase::connecting) return {pollfd{socket_fd_, POLLOUT, 0}};
  short events = POLLIN;
  if (session_ && (libssh2_session_block_directions(session_) & LIBSSH2_SESSION_BLOCK_OUTBOUND)) {
    events |= POLLOUT;
  }
  return {pollfd{socket_fd_, events, 0}};
}

int64_t SshConnection::next_deadline_ms() const {
  if (phase_ == SshPhase::closed) return -1;
  if (phase_ == SshPhase::running) {
    Millis liveness = shared_->options.liveness_timeout;
    return liveness.count() > 0 ? last_received_ms_ + liveness.count() : -1;
  }
  return deadline_;
}

void SshConnection::send(std::string bytes) {
  if (phase_ == SshPhase::closed) return;
  if (channel_role_ == ChannelRole::agent && channel_) channel_->write(bytes);
  else pending_input_ += bytes;
}

std::string SshConnection::take_received() { return std::exchange(received_, {}); }
std::string SshConnection::take_diagnostics() { return std::exchange(diagnostics_, {}); }

void SshConnection::close_input() {
  input_closed_ = true;
  if (channel_role_ == ChannelRole::agent && channel_) channel_->close_input();
}

void SshConnection::pump() {
  for (int rounds = 0; rounds < 1000 && phase_ != SshPhase::closed; ++rounds) {
    if (!step()) break;
  }
  check_deadlines();
}

bool SshConnection::step() {
  switch (phase_) {
    case SshPhase::queued: {
      if (shared_->in_setup >= shared_->options.max_parallel) return false;
      ++shared_->in_setup;
      counted_in_setup_ = true;
      started_at_ = now();
      deadline_ = started_at_ + shared_->options.connect_timeout.count();
      addrinfo hints{};
      hints.ai_family = AF_UNSPEC;
      hints.ai_socktype = SOCK_STREAM;
      hints.ai_flags = AI_NUMERICSERV;
      addrinfo* found = nullptr;
      // Blocking, like OpenSSH: /etc/hosts or a nearby resolver answer at once; an IP never
      // touches the resolver.
      int rc = ::getaddrinfo(target_.host.c_str(), std::to_string(target_.port).c_str(), &hints, &found);
      if (rc != 0) {
        close_with(target_.host + ": resolve: cannot resolve '" + target_.host + "': " + gai_strerror(rc) +
                       "; fix: check the host name in the spec (and /etc/hosts or DNS on this machine)",
                   true);
        return true;
      }
      for (addrinfo* entry = found; entry; entry = entry->ai_next) {
        const auto* raw = reinterpret_cast<const unsigned char*>(entry->ai_addr);
        sockaddrs_.push_back({entry->ai_family, std::vector<unsigned char>(raw, raw + entry->ai_addrlen)});
        char text[INET6_ADDRSTRLEN] = "?";
        const void* where = entry->ai_family == AF_INET6
                                ? static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(entry->ai_addr)->sin6_addr)
                                : static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(entry->ai_addr)->sin_addr);
        ::inet_ntop(entry->ai_family, where, text, sizeof text);
        addresses_.push_back(entry->ai_family == AF_INET6 ? "[" + std::string(text) + "]" : text);
      }
      ::freeaddrinfo(found);
      phase_ = SshPhase::connecting;
      return true;
    }
    case SshPhase::connecting: return step_connect();
    case SshPhase::handshake: return step_handshake();
    case SshPhase::authenticating: return step_authenticate();
    case SshPhase::probing:
    case SshPhase::uploading:
    case SshPhase::starting:
    case SshPhase::running: return step_running();
    case SshPhase::closed: return false;
  }
  return false;
}

bool SshConnection::step_connect() {
  std::string port = std::to_string(target_.port);
  if (socket_fd_ < 0) {
    std::string last_error;
    while (address_index_ < sockaddrs_.size()) {
      const auto& [family, raw] = sockaddrs_[address_index_];
      info_.address = addresses_[address_index_] + ":" + port;
      socket_fd_ = ::socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
      if (socket_fd_ < 0) {
        last_error = errno_text(errno);
        ++address_index_;
        continue;
      }
      int rc = ::connect(socket_fd_, reinterpret_cast<const sockaddr*>(raw.data()),
                         static_cast<socklen_t>(raw.size()));
      if (rc == 0 || errno == EINPROGRESS) break;
      last_error = errno_text(errno);
      ::close(socket_fd_);
      socket_fd_ = -1;
      ++address_index_;
    }
    if (socket_fd_ < 0) {
      close_with(target_.host + ": connect to " + info_.address + " failed: " + last_error +
                     "; fix: is sshd running on " + target_.host + " and listening on port " + port + "?",
                 true);
      return true;
    }
  }
  pollfd ready{socket_fd_, POLLOUT, 0};
  if (::poll(&ready, 1, 0) <= 0) return false;
  int error = 0;
  socklen_t length = sizeof error;
  ::getsockopt(socket_fd_, SOL_SOCKET, SO_ERROR, &error, &length);
  if (error != 0) {
    ::close(socket_fd_);
    socket_fd_ = -1;
    ++address_index_;
    if (address_index_ < sockaddrs_.size()) return true;  // next address
    close_with(target_.host + ": connect to " + info_.address + " failed: " + errno_text(error) +
                   "; fix: is sshd running on " + target_.host + " and listening on port " + port + "?",
               true);
    return true;
  }
  info_.connect_ms = since_start();
  phase_ = SshPhase::handshake;
  return true;
}

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
    if (!options.remote_command.empty()) {
      start_channel(ChannelRole::agent, options.remote_command);
    } else if (!target_.dtrain_path.empty() || !options.remote_dtrain.empty()) {
      start_agent_command(!target_.dtrain_path.empty() ? target_.dtrain_path : options.remote_dtrain);
    } else {
      start_channel(ChannelRole::probe, posix_shell(probe_command(options.version)));
    }
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
    message += " (no ssh-agent, no key in " + home_directory() + "/.ssh)";
  }
  message += "; fix: authorize your public key on " + target_.host + " (ssh-copy-id -i KEY.pub " + user + "@" +
             target_.host + "), or set ssh.identity to a key that is (ed25519 or ECDSA)";
  close_with(message, true);
  return true;
}

void SshConnection::start_channel(ChannelRole role, std::string command) {
  channel_ = std::make_unique<ExecChannel>();
  channel_role_ = role;
  channel_->start(session_, std::move(command));
  if (role == ChannelRole::agent) {
    phase_ = SshPhase::starting;
    if (!pending_input_.empty()) channel_->write(std::exchange(pending_input_, {}));
    if (input_closed_) channel_->close_input();
  } else {
    phase_ = role == ChannelRole::probe ? SshPhase::probing : SshPhase::uploading;
  }
}

void SshConnection::start_agent_command(const std::string& remote_path) {
  info_.remote_dtrain = remote_path;
  // `exec`: the agent replaces the login shell and is sshd's direct child (docs/architecture.md §5). Only
  // the path and fixed arguments travel here; configuration goes over the channel.
  std::string command = "exec " + shell_quote(remote_path);
  for (const std::string& argument : shared_->options.agent_args) command += " " + shell_quote(argument);
  start_channel(ChannelRole::agent, command);
}

void SshConnection::finish_probe() {
  const SshOptions& options = shared_->options;
  std::string out = channel_->take_stdout();
  std::string err = channel_->take_stderr();
  if (channel_->state() == ExecChannel::State::failed || channel_->exit_code().value_or(-1) != 0) {
    close_with(target_.host + ": provisioning probe failed: " +
                   (channel_->error().empty() ? std::string(trim(err)) : channel_->error()) +
                   "; fix: set ssh.remote_dtrain to the path of dtrain " + options.version + " on the host",
               true);
    return;
  }
  info_.remote_os = probe_value(out, "os");
  remote_home_ = probe_value(out, "home");
  std::string cache_dir = remote_home_ + "/.cache/dtrain/" + options.version;
  Status loaded = shared_->binary.load();
  if (!loaded) {
    close_with(target_.host + ": provisioning: " + loaded.error().message, true);
    return;
  }
  if (probe_value(out, "cache_sha") == shared_->binary.sha256()) {
    info_.provisioning = "cached";
    start_agent_command(cache_dir + "/dtrain");
    return;
  }
  // A version string is only a claim: a dtrain on PATH runs as the agent only if it is this
  // very binary, byte for byte, like a cached copy. Otherwise the cache gets a fresh copy.
  if (probe_value(out, "path_version") == "dtrain " + options.version) {
    std::string path_bin = probe_value(out, "path_bin");
    if (probe_value(out, "path_sha") == shared_->binary.sha256()) {
      info_.provisioning = "in PATH";
      start_agent_command(path_bin);
      return;
    }
    std::string got = probe_value(out, "path_sha");
    diagnostics_ += "dtrain: " + target_.host + ": " + path_bin + " on PATH says dtrain " + options.version +
                    " but its sha256 differs from this binary's (" + (got.empty() ? std::string("unknown") : got) +
                    " vs " + shared_->binary.sha256() + "); copying this binary to " + cache_dir + " instead\n";
  }
  if (info_.remote_os != shared_->os) {
    close_with(target_.host + ": provisioning: the host runs '" + info_.remote_os + "' but this dtrain is built for '" +
                   shared_->os + "', so it cannot be copied there; fix: install dtrain " + options.version + " on " +
                   target_.host + " and set ssh.remote_dtrain to its path",
               true);
    return;
  }
  if (remote_home_.empty() || remote_home_[0] != '/') {
    close_with(target_.host + ": provisioning: the remote $HOME is '" + remote_home_ +
                   "', not an absolute path; fix: set ssh.remote_dtrain",
               true);
    return;
  }
  // Copy to a temporary name, verify the checksum there, then rename: a concurrent launch or
  // an interrupted copy never leaves a half-written `dtrain` behind.
  upload_path_ = cache_dir + "/dtrain";
  std::string dir = shell_quote(cache_dir);
  std::string command =
      "set -e; umask 077; mkdir -p " + dir + "; t=" + dir + "/dtrain.tmp.$$; trap 'rm -f \"$t\"' EXIT; "
      "cat > \"$t\"; "
      "if ! echo '" + shared_->binary.sha256() + "  '\"$t\" | sha256sum -c --status; then "
      "echo \"checksum mismatch after copy (got $(sha256sum < \"$t\" | cut -c1-64))\" >&2; exit 3; fi; "
      "chmod 0755 \"$t\"; mv -f \"$t\" " + dir + "/dtrain; trap - EXIT; echo ok";
  upload_started_ms_ = now();
  deadline_ = now() + options.provision_timeout.count();
  start_channel(ChannelRole::upload, posix_shell(command));
  channel_->write(*shared_->binary.contents());
  channel_->close_input();
}

void SshConnection::finish_upload() {
  std::string out = channel_->take_stdout();
  std::string err = channel_->take_stderr();
  if (channel_->state() == ExecChannel::State::failed || channel_->exit_code().value_or(-1) != 0 ||
      trim(out) != "ok") {
    close_with(target_.host + ": provisioning: copying dtrain to " + upload_path_ + " failed: " +
                   (channel_->error().empty() ? std::string(trim(err)) : channel_->error()) +
                   "; fix: check free space and permissions of ~/.cache on " + target_.host +
                   ", or install dtrain there and set ssh.remote_dtrain",
               true);
    return;
  }
  int64_t took = now() - upload_started_ms_;
  info_.provisioning = "copied " + megabytes(shared_->binary.contents()->size()) + " in " + format_duration(Millis(took));
  deadline_ = now() + shared_->options.connect_timeout.count();
  start_agent_command(upload_path_);
}

bool SshConnection::step_running() {
  bool progressed = channel_->pump();
  if (channel_role_ == ChannelRole::agent) {
    std::string out = channel_->take_stdout();
    std::string err = channel_->take_stderr();
    if (!out.empty() || !err.empty()) last_received_ms_ = now();
    received_ += out;
    diagnostics_ += err;
    if (phase_ == SshPhase::starting && channel_->state() != ExecChannel::State::opening &&
        channel_->state() != ExecChannel::State::executing && channel_->state() != ExecChannel::State::failed) {
      phase_ = SshPhase::running;
      info_.started_ms = since_start();
      last_received_ms_ = now();
      if (counted_in_setup_) {
        --shared_->in_setup;
        counted_in_setup_ = false;
      }
      progressed = true;
    }
    if (!channel_->finished()) {
      if (phase_ == SshPhase::running) {
        int seconds = 0;
        libssh2_keepalive_send(session_, &seconds);
      }
      return progressed;
    }
    if (channel_->state() == ExecChannel::State::failed) {
      bool setup = phase_ == SshPhase::starting;
      close_with(target_.host + (setup ? ": exec: cannot start the agent: " : ": ssh connection lost: ") +
                     channel_->error(),
                 setup);
    } else if (!channel_->exit_signal().empty()) {
      close_with(target_.host + ": remote command killed by signal " + channel_->exit_signal(), false);
    } else {
      int code = channel_->exit_code().value_or(-1);
      std::string hint;
      if (code == 127 && !info_.remote_dtrain.empty()) {
        hint = " (" + info_.remote_dtrain + " not found on the host; fix: correct ssh.remote_dtrain, or leave it "
               "empty so that dtrain copies itself there)";
      } else if (code == 126 && !info_.remote_dtrain.empty()) {
        hint = " (" + info_.remote_dtrain + " is not executable on the host)";
      }
      close_with(target_.host + ": remote command exited with code " + std::to_string(code) + hint, false);
    }
    return true;
  }
  if (!channel_->finished()) return progressed;
  if (channel_role_ == ChannelRole::probe) finish_probe();
  else finish_upload();
  return true;
}

void SshConnection::check_deadlines() {
  if (phase_ == SshPhase::closed || phase_ == SshPhase::queued) return;
  int64_t current = now();
  if (phase_ == SshPhase::running) {
    Millis liveness = shared_->options.liveness_timeout;
    if (liveness.count() > 0 && current - last_received_ms_ >= liveness.count()) {
      close_with(target_.host + ": nothing received for " + format_duration(liveness) +
                     " (host down or cut off?); the connection is given up",
                 false);
    }
    return;
  }
  if (deadline_ < 0 || current < deadline_) return;
  std::string limit = format_duration(shared_->options.connect_timeout);
  std::string fix = "; fix: is " + target_.host + " up and reachable from here (firewall, partition)? "
                    "ssh.connect_timeout is " + limit;
  switch (phase_) {
    case SshPhase::connecting:
      close_with(target_.host + ": connect to " + info_.address + " timed out after " + limit + fix, true);
      break;
    case SshPhase::uploading:
      close_with(target_.host + ": provisioning: copying dtrain timed out after " +
                     format_duration(shared_->options.provision_timeout) + "; fix: check the link to " + target_.host +
                     ", or install dtrain there and set ssh.remote_dtrain",
                 true);
      break;
    default:
      close_with(target_.host + ": " + to_string(phase_) + " with " + info_.address + " timed out after " + limit + fix,
                 true);
  }
}

void SshConnection::close_with(std::string reason, bool failure) {
  if (phase_ == SshPhase::closed) return;
  close_reason_ = std::move(reason);
  failed_ = failure;
  phase_ = SshPhase::closed;
  teardown();
}

void SshConnection::teardown() {
  if (counted_in_setup_) {
    --shared_->in_setup;
    counted_in_setup_ = false;
  }
  if (agent_) {
    libssh2_agent_disconnect(agent_);
    libssh2_agent_free(agent_);
    agent_ = nullptr;
  }
  if (session_) {
    bool clean = channel_ && channel_->state() == ExecChannel::State::done;
    if (clean) libssh2_session_disconnect(session_, "dtrain: done");
    // With the socket shut down, every libssh2 call below fails at once instead of waiting for
    // a peer that may be cut off; blocking mode keeps the frees from returning EAGAIN.
    if (socket_fd_ >= 0) ::shutdown(socket_fd_, SHUT_RDWR);
    libssh2_session_set_blocking(session_, 1);
    libssh2_session_set_timeout(session_, 1000);
    if (channel_) channel_->abandon();
    libssh2_session_free(session_);
    session_ = nullptr;
  }
  if (socket_fd_ >= 0) {
    ::close(socket_fd_);
    socket_fd_ = -1;
  }
}

void SshConnection::shutdown(int grace_ms) {
  if (phase_ == SshPhase::closed) {
    teardown();
    return;
  }
  close_input();
  int64_t until = now() + std::max(0, grace_ms);
  while (phase_ != SshPhase::closed && phase_ != SshPhase::queued) {
    pump();
    if (phase_ == SshPhase::closed) break;
    int64_t left = until - now();
    if (left <= 0) break;
    std::vector<pollfd> fds = poll_fds();
    ::poll(fds.data(), fds.size(), static_cast<int>(std::min<int64_t>(left, 50)));
  }
  close_with(target_.host + ": connection shut down by dtrain", false);
}

// ---------------------------------------------------------------------------------------------

SshTransport::SshTransport(SshOptions options) : shared_(std::make_shared<SshShared>(std::move(options))) {}
SshTransport::~SshTransport() = default;

const SshOptions& SshTransport::options() const { return shared_->options; }

Result<std::unique_ptr<SshConnection>> SshTransport::connect(const AgentTarget& target) {
  if (target.host.empty()) return Error::internal("SshTransport::connect: empty host");
  return std::make_unique<SshConnection>(shared_, target);
}

Result<std::unique_ptr<AgentConnection>> SshTransport::start_agent(const AgentTarget& target) {
  auto connection = connect(target);
  if (!connection) return connection.error();
  return std::unique_ptr<AgentConnection>(std::move(*connection));
}

}  // namespace dtrain::transport
