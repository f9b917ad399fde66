#pragma once
// A real `dtrain agent` started through LocalTransport, driven by a test: frames out, frames in,
// waits with deadlines. Shared by the agent_*_test files; other tests may use it too.

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "launcher/proto/frame.h"
#include "launcher/proto/messages.h"
#include "launcher/transport/local_transport.h"

namespace dtrain::test {

class AgentSession {
 public:
  /// Starts DTRAIN_EXE-style `<dtrain_path> agent` with a fresh run id and a short runtime dir
  /// (/tmp/dtrain-<uid>/t<pid>-<n>). Does not send config yet.
  explicit AgentSession(std::string dtrain_path, std::string host = "localhost");
  /// Shuts the agent down (grace 5 s).
  ~AgentSession();

  /// The config frame with this session's run id, host and runtime dir; `overrides` merged in.
  nlohmann::json config(const nlohmann::json& overrides = nlohmann::json::object()) const;
  /// Sends config and waits for hello (nullopt if none within the timeout).
  std::optional<nlohmann::json> handshake(const nlohmann::json& overrides = nlohmann::json::object());

  void send(const nlohmann::json& message);
  /// Sends bytes as they are (for malformed-frame tests).
  void send_raw(std::string bytes);

  /// Pumps until a not-yet-taken message matching `predicate` arrives; takes and returns it.
  /// Messages that do not match stay available for later waits. nullopt at the deadline.
  std::optional<nlohmann::json> wait_for(const std::function<bool(const nlohmann::json&)>& predicate,
                                         int timeout_ms = 10'000);
  std::optional<nlohmann::json> wait_for_type(const std::string& type, int timeout_ms = 10'000);

  /// Pumps until the agent's stdout closes; true if it did within the timeout.
  bool wait_closed(int timeout_ms = 10'000);

  /// Every message received so far, in order (taken or not).
  const std::vector<nlohmann::json>& history() const { return history_; }
  /// Everything the agent wrote to stderr so far.
  const std::string& diagnostics();

  transport::LocalAgentConnection& connection() { return *connection_; }
  pid_t agent_pid() const { return *connection_->local_pid(); }
  const std::string& run_id() const { return run_id_; }
  const std::string& runtime_dir() const { return runtime_dir_; }
  /// A decode error seen on the agent's output, if any (there should never be one).
  const std::string& decode_error() const { return decode_error_; }

 private:
  void pump_once(int timeout_ms);

  std::string host_;
  std::string run_id_;
  std::string runtime_dir_;
  std::unique_ptr<transport::LocalAgentConnection> connection_;
  proto::FrameDecoder decoder_;
  std::vector<nlohmann::json> history_;
  std::vector<bool> taken_;
  std::string diagnostics_;
  std::string decode_error_;
};

/// A spawn frame for generation `gen`: one worker per entry of `ranks`, argv shared, DTRAIN_RUN_ID
/// set to `run_id` so that processes_of_run() finds every process of the test.
nlohmann::json spawn_message(int gen, const std::vector<int>& ranks,
                             const std::vector<std::string>& argv, const std::string& run_id);

}  // namespace dtrain::test
