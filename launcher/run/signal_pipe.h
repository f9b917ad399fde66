#pragma once
// SignalPipe: the supervisor's signals (INT, TERM, HUP: stop; USR1: Slurm's warning before the
// time limit) as bytes on a pipe, so that the event loop handles them like any other input. The
// handlers only write(2) one byte; SIGPIPE is ignored (a closed agent pipe is an error value).

#include <string>

#include "launcher/base/fd.h"

namespace dtrain::run {

class SignalPipe {
 public:
  /// Installs the handlers; one SignalPipe at a time per process. Without a pipe (no fds left)
  /// signals are dropped and fd() is -1.
  SignalPipe();
  ~SignalPipe();  ///< the handlers stay, writing nowhere
  SignalPipe(const SignalPipe&) = delete;
  SignalPipe& operator=(const SignalPipe&) = delete;

  /// The read end, for poll(); -1 when there is none.
  int fd() const { return read_.valid() ? read_.get() : -1; }
  /// The signal numbers that arrived since the last call, oldest first. Never blocks.
  std::string take();

 private:
  UniqueFd read_;
  UniqueFd write_;
};

}  // namespace dtrain::run
