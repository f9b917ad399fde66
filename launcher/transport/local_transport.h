#pragma once
// The `local` transport: the agent for this host runs as a child process (`dtrain agent`) and
// the protocol flows over its stdin/stdout pipes. No sshd needed; this is the default for
// localhost and what the agent's integration tests drive.

#include <sys/types.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "launcher/base/fd.h"
#include "launcher/transport/transport.h"

namespace dtrain::transport {

/// A running child agent. Our ends of its pipes are non-blocking and CLOEXEC, so no other
/// child (another host's agent, a worker) can hold them open and hide this agent's EOF.
class LocalAgentConnection final : public AgentConnection {
 public:
  /// Takes ownership of a started child and our ends of its three pipes.
  LocalAgentConnection(std::string host, pid_t pid, UniqueFd stdin_fd, UniqueFd stdout_fd,
                       UniqueFd stderr_fd);
  /// shutdown(kDestructorGraceMs): the agent gets time to fence (kill and reap its workers).
  ~LocalAgentConnection() override;

  std::vector<pollfd> poll_fds() const override;
  void pump() override;
  void send(std::string bytes) override;
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
  void close_input() override;
  void shutdown(int grace_ms) override;
  std::optional<pid_t> local_pid() const override { return pid_; }
  std::string describe() const override;

  /// The wait status once reaped (for tests), else nullopt.
  std::optional<int> wait_status() const { return wait_status_; }

  static constexpr int kDestructorGraceMs = 5000;
  /// How long closed() waits, after stdout EOF, for the agent's exit status.
  static constexpr int64_t kExitAfterEofMs = 1000;

 private:
  void write_queued();
  void read_stdout();
  void read_stderr();
  /// waitpid(WNOHANG); true once the child has been reaped (now or before).
  bool try_reap() const;

  std::string host_;
  pid_t pid_;
  UniqueFd stdin_;
  UniqueFd stdout_;
  UniqueFd stderr_;
  std::string outgoing_;
  std::string received_;
  std::string diagnostics_;
  UniqueFd pidfd_;  // readable when the agent exits; -1 where pidfd_open is unavailable
  bool stdout_closed_ = false;
  int64_t stdout_closed_ms_ = 0;
  std::string read_error_;
  bool shut_down_ = false;
  mutable std::optional<int> wait_status_;
};

/// Starts `<dtrain_path> agent` as a child (dtrain_path empty: this very executable, through
/// /proc/self/exe). Fails at once, with the reason, if the binary cannot be executed.
class LocalTransport final : public Transport {
 public:
  Result<std::unique_ptr<AgentConnection>> start_agent(const AgentTarget& target) override;
};

}  // namespace dtrain::transport
