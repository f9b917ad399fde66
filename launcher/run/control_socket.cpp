#include "launcher/run/control_socket.h"

#include <cerrno>
#include <cstring>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

namespace dtrain::run {
namespace {

/// Best effort: the socket is non-blocking and a one-line reply fits its buffer; a client that
/// is gone or full loses it, and is closed anyway.
void send_error_line(int fd, const std::string& message) {
  std::string line = to_line(ControlReply{false, "", std::nullopt, message}) + "\n";
  [[maybe_unused]] ssize_t ignored = ::send(fd, line.data(), line.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
}

}  // namespace

Result<ControlSocket> ControlSocket::open(const std::string& socket_path, ControlSocketLimits limits) {
  ControlSocket control;
  control.limits_ = limits;
  control.socket_path_ = socket_path;
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (control.socket_path_.size() >= sizeof address.sun_path) {
    return Error::infra("control socket path '" + control.socket_path_ + "' is longer than " +
                        std::to_string(sizeof address.sun_path - 1) + " bytes");
  }
  std::strcpy(address.sun_path, control.socket_path_.c_str());
  ::unlink(control.socket_path_.c_str());
  control.listener_.reset(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!control.listener_.valid()) return Error::infra("socket: " + errno_text(errno));
  if (::bind(control.listener_.get(), reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 ||
      ::listen(control.listener_.get(), 8) != 0) {
    return Error::infra(control.socket_path_ + ": " + errno_text(errno));
  }
  return control;
}

ControlSocket::~ControlSocket() { close(); }

void ControlSocket::close() {
  if (!listener_.valid()) return;
  listener_.reset();
  clients_.clear();
  ::unlink(socket_path_.c_str());
}

void ControlSocket::add_poll_fds(std::vector<pollfd>& fds) const {
  if (listener_.valid()) fds.push_back({listener_.get(), POLLIN, 0});
  for (const Client& client : clients_) fds.push_back({client.fd.get(), POLLIN, 0});
}

void ControlSocket::accept_clients(int64_t now_ms) {
  for (;;) {
    int fd = ::accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) break;
    UniqueFd client_fd(fd);
    ucred peer{};
    socklen_t length = sizeof peer;
    // Only the user who owns the run may control it (root may too).
    if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &peer, &length) != 0 ||
        (peer.uid != ::getuid() && peer.uid != 0)) {
      continue;
    }
    if (clients_.size() >= limits_.max_clients) {
      send_error_line(fd, "ctl.sock: the supervisor already serves " + std::to_string(limits_.max_clients) +
                              " clients (the limit); retry when some have closed (a program that keeps "
                              "connections to ctl.sock open holds them)");
      continue;  // client_fd closes it
    }
    clients_.push_back({std::move(client_fd), {}, now_ms});
  }
}

void ControlSocket::pump(const Handler& handler, int64_t now_ms) {
  if (!listener_.valid()) return;
  // Clients that closed leave before new ones are counted against the cap; a new client's
  // request, often sent with the connect, is answered in the same pump.
  serve_clients(handler, now_ms, 0);
  size_t known = clients_.size();
  accept_clients(now_ms);
  serve_clients(handler, now_ms, known);
}

void ControlSocket::serve_clients(const Handler& handler, int64_t now_ms, size_t first) {
  for (auto it = clients_.begin() + static_cast<std::ptrdiff_t>(first); it != clients_.end();) {
    bool done = false;
    bool would_block = false;
    Result<size_t> got = read_some(it->fd.get(), it->buffer, &would_block);
    if (!got || (*got == 0 && !would_block) || it->buffer.size() > 65536) done = true;
    size_t newline = it->buffer.find('\n');
    if (newline != std::string::npos) {
      // The one place a control request is parsed; a bad one is answered with why, never thrown.
      Result<ControlRequest> request = parse_control_request(std::string_view(it->buffer).substr(0, newline));
      ControlReply reply = request ? handler(*request) : ControlReply{false, "", std::nullopt, request.error().message};
      (void)write_all(it->fd.get(), to_line(reply) + "\n");
      done = true;
    } else if (!done && now_ms - it->connected_ms >= limits_.idle_ms) {
      send_error_line(it->fd.get(), "ctl.sock: no complete request within " + std::to_string(limits_.idle_ms) +
                                        " ms of connecting; closed (send one JSON line, e.g. {\"type\":\"status\"})");
      done = true;
    }
    it = done ? clients_.erase(it) : it + 1;
  }
}

}  // namespace dtrain::run
