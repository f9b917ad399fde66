#pragma once
// Child processes that this process starts. spawn_process() is the one fork/exec in dtrain: it
// prepares everything before fork, so that the child runs only async-signal-safe calls up to
// exec (the agent forks while its sampler thread runs), and reports a failure before exec
// through a CLOEXEC pipe. It returns a bare pid that the caller reaps: the agent's workers use
// it directly (the agent reaps them as a subreaper and its kill/fence logic owns their process
// groups). PipedChild, built on it, is the RAII type for a child whose stdin/stdout/stderr are
// pipes driven without blocking by the caller's poll loop (ssh, srun, nvidia-smi, gdb, a local
// agent); run_command() runs a short-lived command to its end on top of it (drills, cut/heal
// commands, hosts). An owned PipedChild is killed and reaped when its owner goes away: nothing
// outlives the owner by accident.

#include <poll.h>
#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "launcher/base/duration.h"
#include "launcher/base/fd.h"
#include "launcher/base/process_signal.h"
#include "launcher/base/result.h"

namespace dtrain {

/// spawn_process()'s stdio value for "this fd reads /dev/null (stdin) or writes to it".
constexpr int kDevNull = -1;

/// Everything one child gets. The strings are copied into exec's arrays before fork.
struct SpawnRequest {
  /// argv[0]: a path, or a name looked up in PATH (the child's PATH when `environment` is set).
  std::vector<std::string> argv;
  /// The child's whole environment, "NAME=value" each; none: ours.
  std::optional<std::vector<std::string>> environment;
  /// chdir() there before exec; empty: our working directory.
  std::string working_directory;
  /// What the child's fds 0, 1 and 2 become: one of our fds (dup2'd into place), or kDevNull.
  int stdin_fd = kDevNull;
  int stdout_fd = kDevNull;
  int stderr_fd = kDevNull;
  /// Our fds that stay open in the child at the same numbers. Every other fd of ours (another
  /// child's pipe, a log file, what we inherited from sshd) is closed at exec: it would
  /// otherwise live as long as the child and whatever it starts, and hide an EOF.
  std::vector<int> fds_to_keep;
  /// setpgid(0, 0) in the child (and from the parent, so that the group exists whichever runs
  /// first): a terminal's Ctrl-C does not reach it, and kill(-pid) ends what it started too.
  bool own_process_group = false;
  /// PR_SET_PDEATHSIG SIGKILL in the child: it dies when the thread that spawned it ends (with
  /// the process that owns it, when the main thread spawns). A child whose parent is already
  /// gone by then exits at once with 127.
  bool kill_with_parent = false;
  /// Every signal disposition back to SIG_DFL (a worker starts clean whatever the agent ignored);
  /// false: SIGPIPE only (exec resets caught signals itself; an ignored SIGHUP, as under nohup,
  /// stays ignored). The signal mask is emptied either way: the owner may block signals for its
  /// own loop.
  bool reset_every_signal = false;
};

/// The step at which a spawn failed.
enum class SpawnStep {
  none,               ///< it did not fail
  pipe,               ///< in the parent: the exec-failure pipe
  fork,               ///< in the parent
  stdio,              ///< in the child: opening /dev/null, placing fds 0-2, keeping fds_to_keep
  working_directory,  ///< in the child: chdir
  exec,               ///< in the child: exec itself (ENOENT, EACCES, ENOEXEC...)
};

/// What spawn_process() did: a pid once the child runs the program, else where and why not.
struct SpawnOutcome {
  pid_t pid = -1;
  SpawnStep failed_step = SpawnStep::none;
  int error_number = 0;  ///< errno of the failed step

  bool ok() const { return failed_step == SpawnStep::none; }
};

/// Forks and execs `request`, and returns once the program runs (the CLOEXEC pipe reached EOF)
/// or failed to start. The caller owns the pid: it reaps it and may signal its group; nothing
/// here waits for it later. A child that failed before exec is reaped already.
SpawnOutcome spawn_process(const SpawnRequest& request);

/// A started child with our ends of its three pipes (non-blocking, CLOEXEC: no other child can
/// hold them open and hide this one's EOF). Move-only; the destructor SIGKILLs and reaps it
/// (its whole process group when it got one) unless it was reaped already: once reaped, neither
/// its pid nor its group number is signalled again (either may be someone else's by then).
class PipedChild {
 public:
  struct Options {
    /// setpgid(0, 0) in the child: a terminal's Ctrl-C does not reach it (its owner decides
    /// when it ends), and terminate() ends what it started too (ssh's ProxyJump children).
    bool own_process_group = false;
    /// PR_SET_PDEATHSIG SIGKILL in the child: it dies with its owner (a debugger must never stay
    /// attached to a worker after the agent that started it is gone).
    bool kill_with_parent = false;
    /// Its whole environment ("NAME=value" each); none: ours.
    std::optional<std::vector<std::string>> environment{};
    /// chdir() there before exec; empty: our working directory.
    std::string working_directory{};
  };

  /// Starts argv (argv[0]: a path, or a name looked up in PATH) with only the three pipes open
  /// and signals unblocked. Fails at once, with the reason, when it cannot be executed.
  static Result<PipedChild> spawn(const std::vector<std::string>& argv, Options options);

  PipedChild(PipedChild&& other) noexcept;
  PipedChild& operator=(PipedChild&& other) = delete;
  PipedChild(const PipedChild&) = delete;
  ~PipedChild();

  pid_t pid() const { return handle_.pid(); }
  /// Its handle: copies may signal it from other threads (send_signal) while the owner reaps it,
  /// and see the reap.
  const ProcessHandle& handle() const { return handle_; }

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
  /// Bytes queued by write() that the pipe has not taken yet.
  bool input_pending() const { return outgoing_offset_ < outgoing_.size(); }

  std::string take_stdout() { return std::exchange(stdout_bytes_, {}); }
  std::string take_stderr() { return std::exchange(stderr_bytes_, {}); }
  /// True once its stdout reached EOF (or could not be read).
  bool stdout_closed() const { return !stdout_.valid(); }
  /// Both its stdout and its stderr reached EOF.
  bool output_closed() const { return !stdout_.valid() && !stderr_.valid(); }
  /// Monotonic ms at which stdout ended; -1 before.
  int64_t stdout_closed_ms() const { return stdout_closed_ms_; }
  /// The wait status once reaped (waitpid WNOHANG now when not yet).
  std::optional<int> wait_status() const { return handle_.try_reap(); }
  bool reaped() const { return wait_status().has_value(); }

  /// Closes its input, waits up to `grace_ms` for it to exit (reading its output meanwhile, so
  /// that a child blocked on a full pipe can finish), then SIGKILLs it (its group when it has
  /// one, unless it was reaped already) and reaps it. Idempotent.
  void terminate(int grace_ms);

  /// "exited with code 3", "killed by SIGKILL".
  static std::string describe_status(int wait_status);

 private:
  PipedChild(pid_t pid, bool group, UniqueFd in, UniqueFd out, UniqueFd err);
  void write_queued();
  void read_into(UniqueFd& fd, std::string& into);
  void kill_and_reap();

  ProcessHandle handle_;  // its pid, pidfd and wait status; reaped only through it
  bool own_group_ = false;
  UniqueFd stdin_;
  UniqueFd stdout_;
  UniqueFd stderr_;
  std::string outgoing_;
  size_t outgoing_offset_ = 0;  // outgoing_[0, offset) is written already
  std::string stdout_bytes_;
  std::string stderr_bytes_;
  int64_t stdout_closed_ms_ = -1;
  bool killed_ = false;  // kill_and_reap() ran
};

struct CommandOutput {
  int exit_code = -1;  ///< the exit status, or 128 + signal
  std::string out;
  std::string err;
};

/// Runs `argv` (no shell; argv[0] is a path) with stdin at EOF, capturing stdout and stderr.
/// Past `timeout` the child is SIGKILLed and the result is an error (infra).
Result<CommandOutput> run_command(const std::vector<std::string>& argv, Millis timeout);

/// run_command with `input` written to its stdin, then EOF (`kubectl create -f -`).
Result<CommandOutput> run_command_with_input(const std::vector<std::string>& argv, std::string input, Millis timeout);

/// run_command for a program that is not ours to trust (a worker's interpreter): `options`
/// says its environment, directory and process group; past `max_output_bytes` of stdout and
/// stderr together it is killed (with its group) and the result is an error, as past `timeout`.
Result<CommandOutput> run_command(const std::vector<std::string>& argv, Millis timeout,
                                  const PipedChild::Options& options, size_t max_output_bytes);

}  // namespace dtrain
