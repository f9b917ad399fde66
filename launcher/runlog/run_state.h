#pragma once
// state.json on disk: the supervisor's atomic snapshot of a run (RunSnapshot, run_snapshot.h,
// which holds the format), rewritten on every change, read by `dtrain status`, `logs --follow`,
// `stop`, `resume`, drills, the report and the registry. Readers must not crash on a broken or
// newer one.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <sys/types.h>

#include "launcher/base/result.h"
#include "launcher/runlog/run_directory.h"
#include "launcher/runlog/run_snapshot.h"

namespace dtrain {

/// True for the states a run never leaves: succeeded, failed, stopped.
bool is_terminal_state(std::string_view state);

/// Writes state.json (RunSnapshot::text()) atomically (temp file, fsync, rename): a reader sees
/// the old or the new snapshot, never half of one.
Status write_state(const RunDirectory& run, const RunSnapshot& snapshot);
Status write_state_file(const std::string& path, const RunSnapshot& snapshot);

/// Largest state.json read_state_file() reads: the supervisor's snapshot is a few kB per host,
/// megabytes for the largest runs; a file far past that was not written by dtrain.
inline constexpr size_t kMaxStateFileBytes = size_t{256} << 20;

/// Reads state.json into a RunSnapshot (RunSnapshot::from_json: "version" 1, a newer version is
/// an error that says to upgrade dtrain; absent keys keep their defaults). A missing file, bad
/// JSON or a field of another type: errors naming the path (and the field). Read with
/// read_regular_file: a symbolic link, a FIFO or a device there, or a file over
/// kMaxStateFileBytes, is an error naming it, never followed, waited on or read.
Result<RunSnapshot> read_state(const RunDirectory& run);
Result<RunSnapshot> read_state_file(const std::string& path);

/// Start time of process `pid` in clock ticks since boot (/proc/<pid>/stat field 22), nullopt
/// when it does not exist or is a zombie.
std::optional<int64_t> process_start_ticks(pid_t pid);

/// process_start_ticks(getpid()): what the supervisor stores as "proc_start_ticks".
int64_t current_process_start_ticks();

/// Whether the supervisor recorded in `state` still runs: its pid exists, is not a zombie, and
/// started at the recorded proc_start_ticks (so a reused pid does not count). When the state
/// names another host than this one, liveness cannot be checked here and true is returned.
/// A state without a supervisor pid is not alive.
bool supervisor_alive(const RunSnapshot& state);

/// The state the snapshot records ("running", "failed", ...), "unknown" when it has none.
std::string recorded_state(const RunSnapshot& state);

/// What to show as the run's state: its state, or "supervisor gone" when it is not terminal and
/// `alive` is false; "unknown" when the snapshot has none.
std::string display_state(const RunSnapshot& state, bool alive);

}  // namespace dtrain
