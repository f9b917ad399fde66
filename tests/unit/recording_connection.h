#pragma once
// An agent connection that keeps what the driver sent it and never receives: a stand-in for the
// transport to one agent, for tests of what an AgentLink (or the code above it) sends.

#include <optional>
#include <string>
#include <vector>

#include "launcher/transport/transport.h"

namespace dtrain::testing {

class RecordingConnection : public transport::AgentConnection {
 public:
  explicit RecordingConnection(std::string& sent) : sent_(sent) {}
  std::vector<pollfd> poll_fds() const override { return {}; }
  void pump() override {}
  void send(std::string bytes) override { sent_ += bytes; }
  std::string take_received() override { return ""; }
  std::string take_diagnostics() override { return ""; }
  bool closed() const override { return false; }
  std::string close_reason() const override { return ""; }
  void close_input() override {}
  void shutdown(int) override {}
  std::optional<pid_t> local_pid() const override { return std::nullopt; }
  std::string describe() const override { return "recording"; }

 private:
  std::string& sent_;
};

}  // namespace dtrain::testing
