#pragma once
// One supervisor per run: `dtrain submit` and `dtrain resume` hold flock(LOCK_EX) on
// `<run>/lock` for the supervisor's whole life, so a second one (two terminals, a watchdog and a
// person) is refused before it writes anything in the run directory, instead of unlinking the
// first one's ctl.sock and writing the same state.json and checkpoints. It is a lock, not a pid
// file: the kernel releases it when the holder dies, SIGKILL included, so there is nothing stale
// to clean up. The file's text ("<pid> <host>") only names the holder in the refusal.

#include <sys/types.h>

#include <string>

#include "launcher/base/fd.h"
#include "launcher/base/result.h"
#include "launcher/runlog/run_directory.h"

namespace dtrain {

class RunLock {
 public:
  /// Opens (creating, mode 0600, not through a symlink) `<run>/lock` close-on-exec, so no agent
  /// or worker inherits it, and takes flock(LOCK_EX | LOCK_NB), never waiting. On success the
  /// file holds "<pid> <host>\n" of this process. Held: a user error naming the holder and the
  /// fix, "run R is still supervised by pid P on host H (it holds <run>/lock); `dtrain stop R` ends
  /// it, or wait for it to finish". Other failures (cannot open) are infra errors.
  static Result<RunLock> acquire(const RunDirectory& run);

  /// Writes this process's pid as the holder again: call in a forked child that keeps the lock
  /// (a detached supervisor), whose pid is not the one that took it. The lock itself is shared
  /// by fork (one open file description) and stays held while either process has it open.
  Status record_holder() const;

  const std::string& path() const { return path_; }

 private:
  RunLock(std::string path, UniqueFd fd) : path_(std::move(path)), fd_(std::move(fd)) {}
  std::string path_;
  UniqueFd fd_;
};

/// `<run>/lock`'s holder as the lock file says it ("pid 123 on host gpu01"), for messages; what
/// the file holds is not trusted: at most one short line of printable text is shown.
std::string describe_lock_holder(const std::string& lock_file_text);

}  // namespace dtrain
