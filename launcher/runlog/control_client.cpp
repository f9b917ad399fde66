#include "launcher/runlog/control_client.h"

#include <cerrno>
#include <chrono>
#include <climits>
#include <cstring>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "launcher/base/fd.h"
#include "launcher/base/json_fields.h"

namespace dtrain {
namespace {

using SteadyClock = std::chrono::steady_clock;

int remaining_ms(SteadyClock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - SteadyClock::now());
  return static_cast<int>(std::max<int64_t>(0, std::min<int64_t>(left.count(), INT_MAX)));
}

// Waits until `fd` is ready for `events` or the deadline passes.
Status wait_ready(int fd, short events, SteadyClock::time_point deadline, const std::string& where) {
  for (;;) {
    pollfd entry{fd, events, 0};
    int ready = ::poll(&entry, 1, remaining_ms(deadline));
    if (ready > 0) return {};
    if (ready == 0) return Error::infra(where + ": no reply from the supervisor in time");
    if (errno != EINTR) return Error::infra(where + ": poll: " + errno_text(errno));
  }
}

}  // namespace

Result<std::string> control_socket_path(const RunDirectory& run) {
  std::string link = run.ctl_link_path();
  struct stat info{};
  if (::lstat(link.c_str(), &info) != 0) {
    return Error::infra(link + ": " + errno_text(errno) + " (no supervisor serves this run)");
  }
  if (!S_ISLNK(info.st_mode)) return link;
  char target[PATH_MAX];
  ssize_t length = ::readlink(link.c_str(), target, sizeof target - 1);
  if (length < 0) return Error::infra(link + ": readlink: " + errno_text(errno));
  return std::string(target, static_cast<size_t>(length));
}

Result<ControlReply> send_control_to(const std::string& socket_path, const ControlRequest& request,
                                     Millis timeout) {
  const std::string where = "control socket " + socket_path;
  sockaddr_un address{};
  if (socket_path.size() >= sizeof address.sun_path) {
    return Error::internal(where + ": path longer than " + std::to_string(sizeof address.sun_path - 1) + " bytes");
  }
  address.sun_family = AF_UNIX;
  std::memcpy(address.sun_path, socket_path.c_str(), socket_path.size() + 1);
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd.valid()) return Error::infra(where + ": socket: " + errno_text(errno));
  const auto deadline = SteadyClock::now() + timeout;

  if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&address), sizeof address) != 0) {
    if (errno != EINPROGRESS && errno != EAGAIN) {
      return Error::infra(where + ": connect: " + errno_text(errno) +
                          (errno == ECONNREFUSED || errno == ENOENT ? " (the supervisor is not listening)" : ""));
    }
    if (Status ready = wait_ready(fd.get(), POLLOUT, deadline, where); !ready) return ready.error();
    int error = 0;
    socklen_t length = sizeof error;
    ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &error, &length);
    if (error != 0) return Error::infra(where + ": connect: " + errno_text(error));
  }

  std::string out = to_line(request) + "\n";
  std::string_view pending = out;
  while (!pending.empty()) {
    // MSG_NOSIGNAL: a supervisor that hangs up must give an error, not kill us with SIGPIPE.
    ssize_t sent = ::send(fd.get(), pending.data(), pending.size(), MSG_NOSIGNAL);
    if (sent >= 0) {
      pending.remove_prefix(static_cast<size_t>(sent));
      continue;
    }
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) return Error::infra(where + ": send: " + errno_text(errno));
    if (Status ready = wait_ready(fd.get(), POLLOUT, deadline, where); !ready) return ready.error();
  }

  std::string in;
  while (in.find('\n') == std::string::npos) {
    if (in.size() > (1 << 20)) return Error::infra(where + ": reply longer than 1 MiB without a newline");
    if (Status ready = wait_ready(fd.get(), POLLIN, deadline, where); !ready) return ready.error();
    bool would_block = false;
    Result<size_t> got = read_some(fd.get(), in, &would_block);
    if (!got) return Error::infra(where + ": " + got.error().message);
    if (*got == 0 && !would_block) {
      return Error::infra(where + ": the supervisor closed the connection without a reply");
    }
  }
  std::string line = in.substr(0, in.find('\n'));
  Result<ControlReply> reply = parse_control_reply(line);
  if (!reply) return Error::infra(where + ": " + reply.error().message);
  if (!reply->ok) return Error::user(reply->message);
  return reply;
}

Result<ControlReply> send_control(const RunDirectory& run, const ControlRequest& request, Millis timeout) {
  Result<std::string> socket_path = control_socket_path(run);
  if (!socket_path) return socket_path.error();
  return send_control_to(*socket_path, request, timeout);
}

}  // namespace dtrain
