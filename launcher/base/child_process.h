#pragma once
// Child processes that this process starts and owns. PipedChild is the one RAII type for a
// spawned child whose stdin/stdout/stderr are pipes driven without blocking by the caller's poll
// loop (the openssh transport's `ssh`; meant for every fork/exec site); run_command() runs a
// short-lived command to its end on top of it (drills: their own `dtrain submit --detach`,
// cut/heal commands; hosts: a shell on a local host). An owned child is killed and reaped when
// its owner goes away: nothing outlives the owner by accident.

#include <poll.h>
#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "launcher/base/duration.h"
#include "launcher/base/fd.h"
#include "launcher/base/result.h"

namespace dtrain {

/// A started child with our ends of its three pipes (non-blocking, CLOEXEC: no other child can
/// hold them open and hide this one's EOF). Move-only; the destructor SIGKILLs and reaps it
/// (its whole process group when it got one) unless it was reaped already.
class PipedChild {
 public:
  struct Options {
    /// setpgid(0, 0) in the child: a terminal's Ctrl-C does not reach it (its owner decides
    /// when it ends), and terminate() ends what it started too (ssh's ProxyJump children).
    bool own_process_group = false;
    /// PR_SET_PDEATHSIG SIGKILL in the child: it dies with its owner (a debugger must never stay
    /// attached to a worker after the agent that started it is gone).
    bool kill_with_parent = false;
  };

  /// Starts argv (argv[0]: a path, or a name looked up in PATH) with only the three pipes open
  /// and signals unblocked. Fails at once, with the reason, when it cannot be executed.
  static Result<PipedChild> spawn(const std::vector<std::string>& argv, Options options);

  PipedChild(PipedChild&& other) noexcept;
  PipedChild& operator=(PipedChild&& other) = delete;
  PipedChild(const PipedChild&) = delete;
  ~PipedChild();

  pid_t pid() const { return pid_; }

  /// The fds to wait on before the next pump(): stdout, stderr, stdin while bytes are queued,
  /// and a pidfd once both outputs ended but the child was not reaped yet.
  std::vector<pollfd> poll_fds() const;
  /// Writes what is queued as far as the pipe takes it, reads what is there, reaps an exited
  /// child whose outputs ended. Never blocks.
  void pump();
  /// Queues bytes for its stdin (dropped once the input is closed).
  void write(std::string bytes);
  /// Writes what the pipe takes now, then closes its stdin (EOF).
  void close_input();
  bool input_closed() const { return !stdin_.valid(); }

  std::string take_stdout() { return std::exchange(stdout_bytes_, {}); }
  std::string take_stderr() { return std::exchange(stderr_bytes_, {}); }
  /// True once its stdout reached EOF (or could not be read).
  bool stdout_closed() const { return !stdout_.valid(); }
  /// Monotonic ms at which stdout ended; -1 before.
  int64_t stdout_closed_ms() const { return stdout_closed_ms_; }
  /// The wait status once reaped (waitpid WNOHANG now when not yet).
  std::optional<int> wait_status() const;
  bool reaped() const { return wait_status().has_value(); }

  /// Closes its input, waits up to `grace_ms` for it to exit (reading its output meanwhile, so
  /// that a child blocked on a full pipe can finish), then SIGKILLs it (its group when it has
  /// one) and reaps it. Idempotent.
  void terminate(int grace_ms);

  /// "exited with code 3", "killed by SIGKILL".
  static std::string describe_status(int wait_status);

 private:
  PipedChild(pid_t pid, bool group, UniqueFd in, UniqueFd out, UniqueFd err);
  void write_queued();
  void read_into(UniqueFd& fd, std::string& into);
  void kill_and_reap();

  pid_t pid_ = -1;
  bool own_group_ = false;
  UniqueFd stdin_;
  UniqueFd stdout_;
  UniqueFd stderr_;
  UniqueFd pidfd_;  // readable when the child exits; -1 where pidfd_open is unavailable
  std::string outgoing_;
  size_t outgoing_offset_ = 0;  // outgoing_[0, offset) is written already
  std::string stdout_bytes_;
  std::string stderr_bytes_;
  int64_t stdout_closed_ms_ = -1;
  bool killed_ = false;  // kill_and_reap() ran: never signal the (maybe reused) pid again
  mutable std::optional<int> wait_status_;
};

struct CommandOutput {
  int exit_code = -1;  ///< the exit status, or 128 + signal
  std::string out;
  std::string err;
};

/// Runs `argv` (no shell; argv[0] is a path) with stdin at EOF, capturing stdout and stderr.
/// Past `timeout` the child is SIGKILLed and the result is an error (infra).
Result<CommandOutput> run_command(const std::vector<std::string>& argv, Millis timeout);

}  // namespace dtrain
