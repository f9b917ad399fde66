#include "launcher/transport/ssh_transport.h"

#include <arpa/inet.h>
#include <libssh2.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pwd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "launcher/base/fd.h"
#include "launcher/base/strings.h"
#include "launcher/transport/ssh_shared.h"

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

std::string current_user() {
  if (const passwd* entry = ::getpwuid(::geteuid())) return entry->pw_name;
  return "root";
}

}  // namespace

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
