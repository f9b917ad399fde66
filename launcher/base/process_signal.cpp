#include "launcher/base/process_signal.h"

#include <signal.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <charconv>
#include <mutex>
#include <string>

#include <spdlog/spdlog.h>

#include "launcher/base/fd.h"

namespace dtrain {

namespace {

// <linux/pidfd.h>'s value (Linux 6.9); older headers lack it.
constexpr unsigned kPidfdSignalProcessGroup = 1U << 2;

std::atomic<SignalMechanism> mechanism{SignalMechanism::automatic};

// Whether the kernel takes PIDFD_SIGNAL_PROCESS_GROUP: unknown until the first group signal.
enum class GroupFlag { unknown, supported, unsupported };
std::atomic<GroupFlag> group_flag{GroupFlag::unknown};

std::mutex observer_mutex;
SignalObserver observer;

// Through syscall(): glibc 2.36's <sys/pidfd.h> lacks extern "C" and does not link from C++.
int open_pidfd(pid_t pid) { return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)); }

int pidfd_signal(int pidfd, int signal, unsigned flags) {
  return static_cast<int>(::syscall(SYS_pidfd_send_signal, pidfd, signal, nullptr, flags));
}

// The state letter and start time (clock ticks since boot: field 22) of /proc/<pid>/stat;
// nullopt when the process does not exist. The command name (field 2) may hold spaces and
// parentheses, so the fields are counted from the last ')'.
struct StatFields {
  char state = '?';
  unsigned long long start_time = 0;
};
std::optional<StatFields> read_stat(pid_t pid) {
  Result<std::string> stat = read_file("/proc/" + std::to_string(pid) + "/stat");
  if (!stat) return std::nullopt;
  size_t paren = stat->rfind(')');
  if (paren == std::string::npos || paren + 2 >= stat->size()) return std::nullopt;
  StatFields fields;
  fields.state = (*stat)[paren + 2];
  // After ") " come fields 3 (state), 4, ...: field 22 is the 20th of them.
  size_t at = paren + 2;
  for (int field = 3; field < 22; ++field) {
    at = stat->find(' ', at);
    if (at == std::string::npos) return std::nullopt;
    ++at;
  }
  const char* begin = stat->data() + at;
  auto [end, error] = std::from_chars(begin, stat->data() + stat->size(), fields.start_time);
  if (error != std::errc() || end == begin) return std::nullopt;
  return fields;
}

std::string signal_name(int signal) {
  const char* abbreviation = signal > 0 ? ::sigabbrev_np(signal) : nullptr;
  return abbreviation ? std::string("SIG") + abbreviation : "signal " + std::to_string(signal);
}

std::string describe_target(pid_t pid, SignalScope scope) {
  return (scope == SignalScope::group ? "process group " : "pid ") + std::to_string(pid);
}

Status notify(pid_t pid, SignalScope scope, int signal, SignalOutcome outcome, Status status) {
  SignalObserver copy;
  {
    std::lock_guard lock(observer_mutex);
    copy = observer;
  }
  if (copy) copy({pid, scope, signal, outcome});
  return status;
}

Status refuse(pid_t pid, SignalScope scope, int signal) {
  std::string why = pid == -1  ? "kill(-1) reaches every process the caller may signal"
                    : pid == 0 ? "0 names the caller's own process group"
                    : pid == 1 ? "1 is init"
                               : "not a process";
  if (signal < 0 || signal >= NSIG) why = "no such signal";
  Error error = Error::internal("refused to signal " + describe_target(pid, scope) + " with " + signal_name(signal) +
                               " (" + why + "); nothing was sent");
  spdlog::error("{}", error.message);
  return notify(pid, scope, signal, SignalOutcome::refused, error);
}

Status gone(pid_t pid, SignalScope scope, int signal, const char* how) {
  return notify(pid, scope, signal, SignalOutcome::gone,
                Error::infra(describe_target(pid, scope) + ": no such process (" + how + "); " + signal_name(signal) +
                             " not sent"));
}

}  // namespace

struct ProcessHandle::State {
  pid_t pid = -1;
  UniqueFd pidfd;                                 // the kernel's name for the process, where it has one
  std::optional<unsigned long long> start_time;  // without a pidfd: what tells a later process apart
  bool child = false;
  mutable std::mutex mutex;  // a signal and a reap through this handle never interleave
  bool reaped = false;
  std::optional<int> wait_status;
};

bool ProcessHandle::identify(State& state, pid_t pid) {
  state.pid = pid;
  if (mechanism.load() != SignalMechanism::start_time) {
    state.pidfd.reset(open_pidfd(pid));
    if (state.pidfd.valid()) return true;
    if (errno == ESRCH) return false;
    // ENOSYS (before Linux 5.3), or seccomp: the start time it is.
  }
  std::optional<StatFields> stat = read_stat(pid);
  if (!stat) return false;
  state.start_time = stat->start_time;
  return true;
}

ProcessHandle ProcessHandle::for_child(pid_t pid) {
  ProcessHandle handle;
  handle.state_ = std::make_shared<State>();
  handle.state_->child = true;
  handle.state_->pid = pid;
  // An unreaped child exists (a zombie at least); a failure leaves a handle that finds it gone.
  if (pid > 1) (void)identify(*handle.state_, pid);
  return handle;
}

Result<ProcessHandle> ProcessHandle::for_process(pid_t pid) {
  if (pid <= 1) {
    Status refused = refuse(pid, SignalScope::process, 0);
    return refused.error();
  }
  ProcessHandle handle;
  handle.state_ = std::make_shared<State>();
  bool exists = identify(*handle.state_, pid);
  // A zombie has exited: what is left is its parent's business, not a process to signal.
  std::optional<StatFields> stat = exists ? read_stat(pid) : std::nullopt;
  if (!stat || stat->state == 'Z') {
    return Error::infra("pid " + std::to_string(pid) + ": no such process (it has exited)");
  }
  return handle;
}

pid_t ProcessHandle::pid() const { return state_ ? state_->pid : -1; }

bool ProcessHandle::reaped() const {
  if (!state_) return false;
  std::lock_guard lock(state_->mutex);
  return state_->reaped;
}

int ProcessHandle::exit_fd() const { return state_ ? state_->pidfd.get() : -1; }

std::optional<int> ProcessHandle::try_reap() const {
  if (!state_ || state_->pid <= 0) return std::nullopt;
  std::lock_guard lock(state_->mutex);
  if (state_->reaped) return state_->wait_status;
  int status = 0;
  pid_t reaped;
  do {
    reaped = ::waitpid(state_->pid, &status, WNOHANG);
  } while (reaped < 0 && errno == EINTR);
  if (reaped == state_->pid) {
    state_->reaped = true;
    state_->wait_status = status;
  }
  return state_->wait_status;
}

int ProcessHandle::reap() const {
  if (!state_ || state_->pid <= 0) return 0;
  // Wait for the exit without reaping (WNOWAIT), so that the lock is free meanwhile: a signal
  // from another thread must not wait for a child that takes long to die.
  siginfo_t info{};
  while (::waitid(P_PID, static_cast<id_t>(state_->pid), &info, WEXITED | WNOWAIT) < 0 && errno == EINTR) {
  }
  std::lock_guard lock(state_->mutex);
  if (state_->reaped) return state_->wait_status.value_or(0);
  int status = 0;
  pid_t reaped;
  do {
    reaped = ::waitpid(state_->pid, &status, 0);
  } while (reaped < 0 && errno == EINTR);
  // ECHILD: someone reaped it behind the handle's back. It is gone all the same.
  state_->reaped = true;
  state_->wait_status = reaped == state_->pid ? status : 0;
  return *state_->wait_status;
}

Status send_signal(const ProcessHandle& target, int signal, SignalScope scope) {
  ProcessHandle::State* state = target.state_.get();
  pid_t pid = state ? state->pid : -1;
  if (pid <= 1 || signal < 0 || signal >= NSIG) return refuse(pid, scope, signal);
  std::lock_guard lock(state->mutex);
  if (state->reaped) return gone(pid, scope, signal, "it exited and was reaped");
  int sent = -1;
  if (state->pidfd.valid()) {
    if (scope == SignalScope::process) {
      sent = pidfd_signal(state->pidfd.get(), signal, 0);
    } else {
      bool use_flag = mechanism.load() == SignalMechanism::automatic && group_flag.load() != GroupFlag::unsupported;
      if (use_flag) {
        sent = pidfd_signal(state->pidfd.get(), signal, kPidfdSignalProcessGroup);
        if (sent == 0) group_flag = GroupFlag::supported;
        if (sent < 0 && errno == EINVAL) group_flag = GroupFlag::unsupported;  // before Linux 6.9
      }
      if (!use_flag || (sent < 0 && errno == EINVAL)) {
        // The leader is not reaped while the pidfd reaches it (a zombie still holds its pid and
        // group number), so -pid is still its group.
        if (pidfd_signal(state->pidfd.get(), 0, 0) != 0) return gone(pid, scope, signal, "it has exited");
        sent = ::kill(-pid, signal);
      }
    }
  } else {
    std::optional<StatFields> now = read_stat(pid);
    if (!now || !state->start_time || now->start_time != *state->start_time) {
      return gone(pid, scope, signal, now ? "its pid belongs to another process now" : "it has exited");
    }
    sent = ::kill(scope == SignalScope::group ? -pid : pid, signal);
  }
  if (sent == 0) return notify(pid, scope, signal, SignalOutcome::sent, {});
  int error = errno;
  if (error == ESRCH) return gone(pid, scope, signal, "it has exited");
  return notify(pid, scope, signal, SignalOutcome::failed,
                Error::infra(signal_name(signal) + " to " + describe_target(pid, scope) + ": " + errno_text(error)));
}

SignalObserver set_signal_observer(SignalObserver replacement) {
  std::lock_guard lock(observer_mutex);
  return std::exchange(observer, std::move(replacement));
}

void set_signal_mechanism(SignalMechanism chosen) { mechanism = chosen; }

}  // namespace dtrain
