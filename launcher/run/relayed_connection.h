#pragma once
// A host's agent reached through a relay (issue 32; relay_tree.h says which): an AgentConnection
// like any other for the AgentLink that owns it, whose bytes travel inside the relay's own link
// (relay_to, relay_from; proto/relay_messages.h). It has no fd: the driver hands it what the
// relay's frames carry (deliver, end) and pumps its link right after.

#include <functional>
#include <string>

#include "launcher/proto/supervisor_messages.h"
#include "launcher/transport/transport.h"

namespace dtrain::run {

class RelayedConnection final : public transport::AgentConnection {
 public:
  /// `to_relay` sends one message on the relay's link; false when it could not (the relay is
  /// lost: this connection then ends with the relay's loss, which the driver reports).
  using ToRelay = std::function<bool(const proto::SupervisorMessage&)>;

  RelayedConnection(std::string host, std::string relay, ToRelay to_relay);

  const std::string& relay() const { return relay_; }
  /// Whether send() would carry bytes (neither ended nor its input closed).
  bool accepts_input() const { return !closed_ && !input_closed_; }

  /// What the relay's relay_from carried for this host.
  void deliver(std::string bytes, std::string diagnostics);
  /// The relay says the session ended (relay_closed), or the relay itself was lost.
  void end(std::string reason);

  std::vector<pollfd> poll_fds() const override { return {}; }
  bool without_fds() const override { return true; }
  void pump() override {}
  void send(std::string bytes) override;
  std::string take_received() override { return std::exchange(received_, {}); }
  std::string take_diagnostics() override { return std::exchange(diagnostics_, {}); }
  bool closed() const override { return closed_; }
  std::string close_reason() const override { return close_reason_; }
  void close_input() override;
  /// Asks the relay to end the session (its agent fences); nothing here to wait for.
  void shutdown(int grace_ms) override;
  std::optional<pid_t> local_pid() const override { return std::nullopt; }
  bool needs_periodic_pump() const override { return false; }
  std::string describe() const override { return host_ + " (relayed by " + relay_ + ")"; }

 private:
  std::string host_;
  std::string relay_;
  ToRelay to_relay_;
  std::string received_;
  std::string diagnostics_;
  bool input_closed_ = false;
  bool closed_ = false;
  std::string close_reason_;
};

}  // namespace dtrain::run
