#pragma once
// A snapshot of the processes in /proc, enough to find everything descended from the agent.
// The agent is a child subreaper, so an orphaned or daemonised grandchild is reparented to it and
// stays in this tree: walking parent links from the agent finds every process it must kill.

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

namespace dtrain::agent {

struct ProcessEntry {
  pid_t pid = 0;
  pid_t parent = 0;
  char state = '?';  ///< as in /proc/<pid>/stat: R, S, D, T, Z, ...
  /// utime + stime + cutime + cstime in clock ticks: its own CPU time and that of the children
  /// it reaped, so that a tree's sum does not drop when a child exits and is waited for.
  long long cpu_ticks = 0;
  long long rss_pages = 0;  ///< resident set size
};

/// Whether /proc shows this process's own pid namespace: /proc/self names getpid(). It does not in
/// a container that bind-mounts the host's /proc, or in a pid namespace without its own proc
/// mount; there every pid read from /proc is some other process's, and walking "descendants of
/// getpid()" would find (and a kill would signal) strangers.
bool proc_shows_own_processes();

/// Every process visible in /proc now. Processes that vanish while being read are skipped.
/// Empty when /proc is not this process's own (proc_shows_own_processes): no entry is better
/// than entries naming other processes.
std::vector<ProcessEntry> scan_processes();

/// The entries of `snapshot` descended from `root` (not `root` itself), parents before children.
std::vector<ProcessEntry> descendants_of(pid_t root, const std::vector<ProcessEntry>& snapshot);

/// One process's state letter, or nullopt when it no longer exists.
std::optional<char> process_state(pid_t pid);

/// The value of `name` in the process's initial environment (/proc/<pid>/environ), or nullopt.
std::optional<std::string> process_environment_value(pid_t pid, const std::string& name);

/// The whole of /proc/<pid>/environ (NUL-separated), or nullopt when it cannot be read. Empty
/// for a moment after an exec: the kernel has not set the new image's environment up yet.
std::optional<std::string> process_environment(pid_t pid);

/// The value of `name` in `environment` (as process_environment returns it), or nullopt.
std::optional<std::string> environment_value(const std::string& environment, const std::string& name);

}  // namespace dtrain::agent
