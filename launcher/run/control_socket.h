#pragma once
// The supervisor's control socket: `dtrain stop` (and later `drill`) talk to a running
// supervisor through it. A unix socket in the run's short runtime directory (mode 0700, peer
// uid checked), linked from the run directory as ctl.sock — never a network listener.
// One JSON line in, one JSON line out, per connection (launcher/runlog/control_client.h is the
// other end). Any process of the user can connect, so clients are bounded: at most
// kMaxControlClients at once (one more gets a one-line error and is closed) and none may hold a
// connection without a complete request for longer than kControlClientIdleMs.

#include <poll.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "launcher/base/fd.h"
#include "launcher/base/result.h"
#include "launcher/runlog/control_protocol.h"

namespace dtrain::run {

/// Clients connected at once. `dtrain stop` holds a connection for one request; 64 is room for
/// every script and person of a user, and the cap keeps a runaway script from exhausting the
/// supervisor's file descriptors (each client is one, as are the agent links).
inline constexpr size_t kMaxControlClients = 64;
/// How long a client may stay connected without sending a complete request line.
inline constexpr int64_t kControlClientIdleMs = 30'000;

struct ControlSocketLimits {
  size_t max_clients = kMaxControlClients;
  int64_t idle_ms = kControlClientIdleMs;  ///< tests use a short one
};

class ControlSocket {
 public:
  /// Answers one parsed request (a request that does not parse is answered here, with why).
  using Handler = std::function<ControlReply(const ControlRequest& request)>;

  /// Binds `socket_path` (in the run's private runtime directory); the caller links the run
  /// directory's ctl.sock to it.
  static Result<ControlSocket> open(const std::string& socket_path, ControlSocketLimits limits = {});
  ControlSocket(ControlSocket&&) = default;
  ControlSocket& operator=(ControlSocket&&) = default;
  ~ControlSocket();

  void add_poll_fds(std::vector<pollfd>& fds) const;
  /// Accepts, reads and answers whatever is ready, and closes clients that sent no complete
  /// request within limits.idle_ms of connecting, each with a one-line error (`now_ms`:
  /// monotonic; call it at least every few hundred ms: the driver's loop does every 100 ms).
  /// A connection past limits.max_clients gets a one-line error and is closed at once.
  /// Never blocks.
  void pump(const Handler& handler, int64_t now_ms);
  /// Clients connected now (answered and refused ones are gone).
  size_t client_count() const { return clients_.size(); }
  /// Removes the socket (also done by the destructor).
  void close();

 private:
  struct Client {
    UniqueFd fd;
    std::string buffer;
    int64_t connected_ms = 0;
  };
  ControlSocket() = default;
  void accept_clients(int64_t now_ms);
  /// Reads, answers and closes (answered, gone, over-long or idle) clients_[first..].
  void serve_clients(const Handler& handler, int64_t now_ms, size_t first);
  ControlSocketLimits limits_;
  UniqueFd listener_;
  std::vector<Client> clients_;
  std::string socket_path_;
};

}  // namespace dtrain::run
