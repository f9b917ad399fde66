#pragma once
// What unit tests of signalling look at: every send_signal() call (SignalLog, through the
// signal module's observer) and a process's state letter in /proc.

#include <mutex>
#include <string>
#include <vector>

#include "launcher/base/fd.h"
#include "launcher/base/process_signal.h"

namespace dtrain::testing {

/// Every send_signal() call, from any thread, while it lives.
class SignalLog {
 public:
  SignalLog() {
    previous_ = set_signal_observer([this](const SignalAttempt& attempt) {
      std::lock_guard lock(mutex_);
      attempts_.push_back(attempt);
    });
  }
  ~SignalLog() { set_signal_observer(previous_); }
  SignalLog(const SignalLog&) = delete;
  SignalLog& operator=(const SignalLog&) = delete;

  std::vector<SignalAttempt> attempts() const {
    std::lock_guard lock(mutex_);
    return attempts_;
  }
  size_t count(SignalOutcome outcome) const {
    size_t n = 0;
    for (const SignalAttempt& attempt : attempts()) n += attempt.outcome == outcome;
    return n;
  }

 private:
  SignalObserver previous_;
  mutable std::mutex mutex_;
  std::vector<SignalAttempt> attempts_;
};

/// The state letter of /proc/<pid>/stat (R, S, Z...), or 0 when there is no such process.
inline char process_state_letter(pid_t pid) {
  Result<std::string> stat = read_file("/proc/" + std::to_string(pid) + "/stat");
  if (!stat) return 0;
  size_t paren = stat->rfind(')');
  return paren != std::string::npos && paren + 2 < stat->size() ? (*stat)[paren + 2] : 0;
}

}  // namespace dtrain::testing
