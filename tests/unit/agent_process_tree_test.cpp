// The agent's view of /proc: it walks its own descendants to kill a generation, so it must know
// when /proc is not its own pid namespace's (every pid there would be a stranger's).

#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>

#include <doctest/doctest.h>
#include "launcher/agent/process_tree.h"
#include "tests/skip.h"

using dtrain::agent::descendants_of;
using dtrain::agent::proc_shows_own_processes;
using dtrain::agent::ProcessEntry;
using dtrain::agent::scan_processes;

namespace {

// Exit codes of the probe run inside the new pid namespace.
constexpr int kGuardHeld = 0;
constexpr int kProcLooksOwn = 10;
constexpr int kScanNotEmpty = 11;
constexpr int kNotPidOne = 12;

int wait_for(pid_t pid) {
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace

TEST_CASE("in its own pid namespace the agent finds its child in /proc") {
  REQUIRE(proc_shows_own_processes());
  pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    ::pause();
    ::_exit(0);
  }
  std::vector<ProcessEntry> below = descendants_of(::getpid(), scan_processes());
  bool found = std::any_of(below.begin(), below.end(), [&](const ProcessEntry& entry) { return entry.pid == child; });
  ::kill(child, SIGKILL);
  wait_for(child);
  CHECK(found);
}

TEST_CASE("in a pid namespace that sees the host's /proc the scan is empty, not a stranger's processes") {
  // The probe must be pid 1 of a new pid namespace while /proc stays this one's: unshare, then
  // fork (the namespace applies to children). Needs CAP_SYS_ADMIN.
  pid_t outer = ::fork();
  REQUIRE(outer >= 0);
  if (outer == 0) {
    if (::unshare(CLONE_NEWPID) != 0) ::_exit(77);
    pid_t probe = ::fork();
    if (probe < 0) ::_exit(78);
    if (probe == 0) {
      if (::getpid() != 1) ::_exit(kNotPidOne);
      // Without the guard, "descendants of getpid()" here is descendants of pid 1 in the host's
      // /proc: every process of the machine.
      if (proc_shows_own_processes()) ::_exit(kProcLooksOwn);
      if (!scan_processes().empty()) ::_exit(kScanNotEmpty);
      ::_exit(kGuardHeld);
    }
    ::_exit(wait_for(probe));
  }
  int result = wait_for(outer);
  if (result == 77) dtrain::testing::skip_test("cannot unshare a pid namespace here (needs root)");
  CHECK(result == kGuardHeld);
}
