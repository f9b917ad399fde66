#include "launcher/agent/attach_pipe.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "launcher/base/exit_code.h"
#include "launcher/base/fd.h"
#include "launcher/proto/agent_messages.h"
#include "launcher/proto/frame.h"

namespace dtrain::agent {

namespace {

void set_blocking(int fd) {
  int flags = ::fcntl(fd, F_GETFL);
  if (flags >= 0) ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
}

int fail(int output_fd, const std::string& message) {
  std::string frame = proto::encode_frame(proto::to_json(proto::AgentError{message, "attach"}));
  (void)write_all(output_fd, frame);
  return to_int(ExitCode::infra);
}

}  // namespace

int run_attach_pipe(int input_fd, int output_fd, const std::string& socket_path, std::string to_agent) {
  set_blocking(input_fd);
  set_blocking(output_fd);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (socket_path.size() >= sizeof address.sun_path) {
    return fail(output_fd, "re-attach: socket path '" + socket_path + "' is too long for a unix socket");
  }
  std::memcpy(address.sun_path, socket_path.c_str(), socket_path.size() + 1);
  UniqueFd agent(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!agent.valid()) return fail(output_fd, "re-attach: socket(AF_UNIX): " + errno_text(errno));
  if (::connect(agent.get(), reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
    return fail(output_fd, "re-attach: no agent waits at " + socket_path + " (" + errno_text(errno) +
                               "): it fenced when no re-attach came in time, or its host restarted");
  }
  if (!to_agent.empty() && !write_all(agent.get(), to_agent)) return 0;
  bool input_open = true;
  char buffer[65536];
  for (;;) {
    pollfd fds[2] = {{agent.get(), POLLIN, 0}, {input_fd, static_cast<short>(input_open ? POLLIN : 0), 0}};
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return 0;
    }
    if (fds[0].revents != 0) {
      ssize_t got = ::read(agent.get(), buffer, sizeof buffer);
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) return 0;  // the agent closed: it fences or waits for another re-attach
      if (!write_all(output_fd, std::string_view(buffer, static_cast<size_t>(got)))) return 0;
    }
    if (input_open && fds[1].revents != 0) {
      ssize_t got = ::read(input_fd, buffer, sizeof buffer);
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) {
        // The supervisor ended the session: the agent sees the end of its channel, and what it
        // still says comes through until it closes.
        input_open = false;
        ::shutdown(agent.get(), SHUT_WR);
        continue;
      }
      if (!write_all(agent.get(), std::string_view(buffer, static_cast<size_t>(got)))) return 0;
    }
  }
}

}  // namespace dtrain::agent
