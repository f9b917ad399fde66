#pragma once
// The one way dtrain sends a signal. A bare pid is a number that the kernel hands to someone else
// once its process is reaped: kill(pid) after that reaches a stranger, kill(-pid) a stranger's
// process group, and a pid of -1 (a field read after another thread cleared it) reaches every
// process of the user, or of the machine as root. So every signal goes through send_signal()
// with a ProcessHandle, which names one process for good:
//
// - a pidfd where the kernel has pidfd_open (Linux 5.3): the kernel itself tells the process
//   from a later one with the same number. Group signals use PIDFD_SIGNAL_PROCESS_GROUP where the
//   kernel has it (Linux 6.9), else kill(-pid) once the pidfd says the leader still exists;
// - else pid + start time (field 22 of /proc/<pid>/stat), checked before every signal.
//
// A handle of our own child also knows when the child was reaped through it: nothing is sent
// after that, to the process or to its group. pid <= 1 and group <= 1 are never signalled: that
// is an internal bug, reported as one (and logged), never sent. tests/unit/base_process_signal_test
// greps launcher/, cli/ and worker/ for any other kill(), killpg(), tgkill() or
// pidfd_send_signal() call.

#include <sys/types.h>

#include <functional>
#include <memory>
#include <optional>

#include "launcher/base/result.h"

namespace dtrain {

/// What a signal reaches: the process, or the process group it leads (a child started with its
/// own group: kill(-pid)).
enum class SignalScope { process, group };

/// A process dtrain may signal. Copies share one state (a copy held by another thread sees the
/// reap); a default-constructed handle names nothing and every signal to it is refused.
class ProcessHandle {
 public:
  ProcessHandle() = default;

  /// A child of this process (fork, spawn_process) that has not been reaped yet. Reap it through
  /// try_reap()/reap() of this handle or a copy, so that the handle knows: a child reaped behind
  /// its back is still safe where the handle holds a pidfd (the kernel answers "no such
  /// process"), and is caught by the start time otherwise. A pid <= 1 gives a handle that
  /// refuses every signal.
  static ProcessHandle for_child(pid_t pid);

  /// A process we did not start, named by pid (in a run log, a host-facts file, /proc): taken
  /// once, now. Errors: pid <= 1 (internal), a process that is gone or a zombie (infra).
  static Result<ProcessHandle> for_process(pid_t pid);

  /// The pid (-1 for a default-constructed handle).
  pid_t pid() const;
  /// True once the child was reaped through this handle or a copy.
  bool reaped() const;
  /// Reaps the child if it has exited (waitpid WNOHANG); its wait status once reaped.
  std::optional<int> try_reap() const;
  /// Waits for the child to exit and reaps it; its wait status (0 when another waiter took it).
  /// The handle's lock is not held while it waits.
  int reap() const;
  /// A pidfd that polls readable once the process exited; -1 without one.
  int exit_fd() const;

 private:
  friend Status send_signal(const ProcessHandle& target, int signal, SignalScope scope);
  struct State;
  /// Takes `pid`'s identity into `state`: a pidfd, else its start time. False when it is gone.
  static bool identify(State& state, pid_t pid);
  std::shared_ptr<State> state_;
};

/// Sends `signal` (0: only checks that it could be sent) to `target`, or to the process group it
/// leads. Nothing is sent, and an Error comes back, when:
/// - the pid or group is <= 1 (internal: "internal bug: refused to signal ..."; also logged);
/// - the process is gone: reaped through the handle, exited, or its pid now names another
///   process (infra, "... no such process ...");
/// - the kernel refuses (EPERM: infra).
/// Thread-safe; a concurrent reap through the same handle waits for the signal to be sent.
Status send_signal(const ProcessHandle& target, int signal, SignalScope scope = SignalScope::process);

/// What became of one send_signal() call.
enum class SignalOutcome {
  sent,     ///< the kernel accepted it
  gone,     ///< not sent: the process was reaped, exited, or its number belongs to another now
  refused,  ///< not sent: pid or group <= 1 (an internal bug)
  failed,   ///< the kernel refused it (EPERM)
};

struct SignalAttempt {
  pid_t pid = -1;
  SignalScope scope = SignalScope::process;
  int signal = 0;
  SignalOutcome outcome = SignalOutcome::failed;
};

/// Receives every send_signal() call, after it was decided (and sent, or not), on the calling
/// thread. For tests, and for a process that wants refusals in its own log. Returns the
/// observer it replaces; an empty function removes it.
using SignalObserver = std::function<void(const SignalAttempt&)>;
SignalObserver set_signal_observer(SignalObserver observer);

/// What the kernel offers send_signal(). Handles made after set_signal_mechanism() use it.
/// Tests pin the fallbacks of older kernels with it; dtrain itself never calls it.
enum class SignalMechanism {
  automatic,                 ///< pidfd, with PIDFD_SIGNAL_PROCESS_GROUP when the kernel has it
  pidfd_without_group_flag,  ///< as Linux 5.3-6.8: pidfd, groups by kill(-pid) after a pidfd check
  start_time,                ///< as a kernel without pidfd_open: pid + start time
};
void set_signal_mechanism(SignalMechanism mechanism);

}  // namespace dtrain
