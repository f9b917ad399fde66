#pragma once
// Proof, for tests, that processes are gone: read straight from /proc, independent of the code
// under test (the agent has its own process scan; tests must not trust it to check itself).
//
// Zombies: a process that has exited but not been reaped still has a /proc entry (state Z). Here
// it is NOT gone: "gone" means reaped, because an unreaped zombie means its parent (the agent,
// the driver) failed to wait for it. Beware that PID 1 in some containers never reaps; a process
// orphaned to it stays a zombie for ever — which is exactly the leak these helpers must catch.
// Pid reuse is not guarded against; within a test's few seconds it does not happen in practice.

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

namespace dtrain::test {

/// Processes whose ancestry (through /proc/<pid>/stat's ppid) leads to `root`, not `root`
/// itself. Zombies included.
std::vector<pid_t> list_descendants(pid_t root);

/// The state letter of `pid` (R, S, D, T, Z, ...), or nullopt once it has been reaped.
std::optional<char> process_state(pid_t pid);

/// True once `pid` has been reaped (no /proc entry); a zombie is not gone.
bool is_gone(pid_t pid);

/// Polls until is_gone(pid) or `timeout_ms` passes; returns is_gone(pid).
bool wait_until_gone(pid_t pid, int timeout_ms);

/// Polls until every pid is gone; returns the ones still there at the deadline.
std::vector<pid_t> wait_until_all_gone(const std::vector<pid_t>& pids, int timeout_ms);

/// Processes (zombies excluded: their environment is no longer readable) whose environment has
/// NAME=VALUE exactly.
std::vector<pid_t> processes_with_env(const std::string& name, const std::string& value);

/// processes_with_env("DTRAIN_RUN_ID", run_id): everything that belongs to a run.
std::vector<pid_t> processes_of_run(const std::string& run_id);

/// Polls until processes_of_run(run_id) is empty; returns what is left at the deadline.
std::vector<pid_t> wait_until_run_gone(const std::string& run_id, int timeout_ms);

/// "1234 (sleep, S, ppid 1)" for failure messages.
std::string describe_process(pid_t pid);

}  // namespace dtrain::test
