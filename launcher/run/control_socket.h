#pragma once
// The supervisor's control socket: `dtrain stop` (and later `drill`) talk to a running
// supervisor through it. A unix socket in the run's short runtime directory (mode 0700, peer
// uid checked), linked from the run directory as ctl.sock — never a network listener.
// One JSON line in, one JSON line out, per connection (launcher/runlog/control_client.h is the
// other end).

#include <poll.h>

#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "launcher/base/fd.h"
#include "launcher/base/result.h"
#include "launcher/runlog/control_protocol.h"

namespace dtrain::run {

class ControlSocket {
 public:
  /// Answers one parsed request (a request that does not parse is answered here, with why).
  using Handler = std::function<ControlReply(const ControlRequest& request)>;

  /// Binds `socket_path` (in the run's private runtime directory); the caller links the run
  /// directory's ctl.sock to it.
  static Result<ControlSocket> open(const std::string& socket_path);
  ControlSocket(ControlSocket&&) = default;
  ControlSocket& operator=(ControlSocket&&) = default;
  ~ControlSocket();

  void add_poll_fds(std::vector<pollfd>& fds) const;
  /// Accepts, reads and answers whatever is ready. Never blocks.
  void pump(const Handler& handler);
  /// Removes the socket (also done by the destructor).
  void close();

 private:
  struct Client {
    UniqueFd fd;
    std::string buffer;
  };
  ControlSocket() = default;
  UniqueFd listener_;
  std::vector<Client> clients_;
  std::string socket_path_;
};

}  // namespace dtrain::run
