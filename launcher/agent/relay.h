#pragma once
// An agent that relays (issue 32; docs/architecture.md §1 "Relays"): it starts other hosts'
// agents over SSH for the supervisor (relay_open) and carries each one's stream both ways
// (relay_to / relay_from): the supervisor speaks the agent protocol with every child as if it
// were connected to it. On the way up, the children's beats and pongs are gathered into one
// relay_batch frame at a time (proto/relay_batcher.h); the rest travels byte for byte. The relay's own loop pumps the children's connections; their
// sessions use the transports the supervisor would (libssh2 or the system's ssh, the same
// host-key policy and provisioning, with the relay's own binary as the copy).
//
// A child's agent fences itself when its session ends, as with a direct connection: when the
// relay closes it (relay_close, the relay's own fence or exit) or loses it. So nothing a relay
// started outlives it.

#include <poll.h>
#include <sys/types.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "launcher/proto/agent_messages.h"
#include "launcher/proto/relay_batcher.h"
#include "launcher/proto/relay_messages.h"
#include "launcher/transport/transport.h"

namespace dtrain::agent {

class Relay {
 public:
  /// Reports (relay_from, relay_closed) leave through `send`, in order.
  using Send = std::function<void(proto::AgentMessage)>;

  explicit Relay(const proto::RelaySsh& ssh, Send send);
  ~Relay();

  /// Starts an agent on each child (a child already relayed is refused with relay_closed).
  void open(const std::vector<proto::RelayChild>& children);
  /// Bytes for a child's agent; for an unknown or closed child they are dropped (its
  /// relay_closed is on its way or went out already).
  void to(const std::string& host, std::string bytes);
  /// Closes a child's input (its agent fences and exits) and forgets it once its session ends.
  void close(const std::string& host);

  /// Every child's fds, for the agent's poll (any readiness: pump()).
  std::vector<pollfd> poll_fds() const;
  /// True while some child must be pumped without an fd event (SSH deadlines), or beats are
  /// held for the next batch: every 100 ms.
  bool needs_periodic_pump() const;
  /// Moves every child's bytes; sends what arrived (the held batch once it is due) and the ends
  /// of sessions. `now_ms`: the agent's monotonic clock.
  void pump(int64_t now_ms);

  /// The pids of the processes this relay started (the system's ssh): the agent, a subreaper,
  /// must leave them to their owners when it reaps.
  std::vector<pid_t> own_pids() const;
  size_t children() const { return children_.size(); }

  /// Ends every session: inputs closed (the children fence), up to `grace_ms` for them to go.
  void shutdown(int grace_ms);

 private:
  struct Child {
    std::unique_ptr<transport::AgentConnection> connection;
    bool closing = false;
  };
  std::unique_ptr<transport::Transport> transport_;
  std::string transport_error_;  ///< why no transport could be made (every child gets it)
  Send send_;
  proto::RelayBatcher batcher_;
  std::map<std::string, Child> children_;
};

}  // namespace dtrain::agent
