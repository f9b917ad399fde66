#pragma once
// The `local` transport: the agent for this host runs as a child process (`dtrain agent`) and
// the protocol flows over its stdin/stdout pipes. No sshd needed; this is the default for
// localhost and what the agent's integration tests drive.

#include <sys/types.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "launcher/base/child_process.h"
#include "launcher/base/fd.h"
#include "launcher/transport/transport.h"

namespace dtrain::transport {

/// A running child agent. Our ends of its pipes are non-blocking and CLOEXEC, so no other
/// child (another host's agent, a worker) can hold them open and hide this agent's EOF.
class LocalAgentConnection final : public AgentConnection {
 public:
  /// Takes ownership of a started agent (PipedChild: the one owned child-process type).
  LocalAgentConnection(std::string host, PipedChild child);
  /// shutdown(kDestructorGraceMs): the agent gets time to fence (kill and reap its workers).
  ~LocalAgentConnection() override;

  std::vector<pollfd> poll_fds() const override { return child_.poll_fds(); }
  void pump() override;
  void send(std::string bytes) override { child_.write(std::move(bytes)); }
  std::string take_received() override;
  std::string take_diagnostics() override;
  /// True once the agent's stdout reached EOF (or could not be read) and the agent has exited,
  /// so that close_reason() can give its exit status; or 1 s after that EOF if it lingers. While
  /// waiting for the exit, poll_fds() includes a pidfd that wakes the caller when it happens.
  bool closed() const override;
  /// "agent exited with code 3", "agent killed by SIGKILL", or, for an agent that closed its
  /// output but lingers, "agent closed its output (pid N still running)".
  std::string close_reason() const override;
  /// Writes what is queued if the pipe takes it now, then closes the agent's stdin.
  void close_input() override { child_.close_input(); }
  void shutdown(int grace_ms) override;
  std::optional<pid_t> local_pid() const override { return child_.pid(); }
  std::string describe() const override;

  /// The wait status once reaped (for tests), else nullopt.
  std::optional<int> wait_status() const { return child_.wait_status(); }

  static constexpr int kDestructorGraceMs = 5000;
  /// How long closed() waits, after stdout EOF, for the agent's exit status.
  static constexpr int64_t kExitAfterEofMs = 1000;

 private:
  std::string host_;
  PipedChild child_;
  std::string received_;
  std::string diagnostics_;
  bool shut_down_ = false;
};

/// Starts `<dtrain_path> agent` as a child (dtrain_path empty: this very executable, through
/// /proc/self/exe). Fails at once, with the reason, if the binary cannot be executed.
class LocalTransport final : public Transport {
 public:
  Result<std::unique_ptr<AgentConnection>> start_agent(const AgentTarget& target) override;
};

}  // namespace dtrain::transport
