#pragma once
// state.json: the supervisor's atomic snapshot of a run, rewritten on every change, read by
// `dtrain status`, `logs --follow` and `stop`. Readers must not crash on a broken or newer one.
//
// Schema, version 1 (keys absent in a file are treated as null; readers ignore unknown keys):
// {
//   "version": 1,
//   "run_id": "train-20261129-234101-a3f2", "name": "train", "tenant": "team-a" | null,
//   "state": "connecting|launching|running|recovering|stopping|succeeded|failed|stopped",
//   "exit_code": int | null,          // set when terminal (launcher/base/exit_code.h)
//   "generation": int, "world_size": int, "restarts": int,
//   "hosts": [{"name": "gpu01", "state": "connecting|connected|lost|excluded",
//              "agent_pid": int (optional)}],
//   "excluded_hosts": ["gpu03"],
//   "supervisor": {"pid": int, "hostname": "login1", "started_at_ms": int,
//                  "proc_start_ticks": int},   // /proc/<pid>/stat field 22, against pid reuse
//   "submitted_at_ms": int, "finished_at_ms": int | null, "updated_at_ms": int,
//   "ranks": [{"rank": int, "host": "gpu01", "local_rank": int, "pid": int | null,
//              "state": "pending|starting|running|exited|failed|killed",
//              "last_beat_ms": int | null, "step": int | null, "loss": number | null,
//              "exit": null | {"code": int} | {"signal": "SIGKILL"}}],
//   "last_recovery": null | {free-form object: "generation", "cause", "started_at_ms",
//                            "duration_ms", phase durations ...},
//   "root_cause": null | {"host", "rank", "local_rank", "pid", "code" | "signal", "log",
//                         "message"},
//   "spec_path": "/path/to/run/spec.yaml",
//   "detached": bool
// }

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <sys/types.h>

#include <nlohmann/json.hpp>

#include "launcher/base/result.h"
#include "launcher/runlog/run_directory.h"

namespace dtrain {

/// The state.json format this dtrain writes and reads.
inline constexpr int kRunStateVersion = 1;

/// True for the states a run never leaves: succeeded, failed, stopped.
bool is_terminal_state(std::string_view state);

/// Writes state.json atomically (temp file, fsync, rename): a reader sees the old or the new
/// snapshot, never half of one. Adds "version" when `state` lacks it. `state` must be an object.
Status write_state(const RunDirectory& run, const nlohmann::json& state);
Status write_state_file(const std::string& path, const nlohmann::json& state);

/// Largest state.json read_state_file() reads: the supervisor's snapshot is a few kB per host,
/// megabytes for the largest runs; a file far past that was not written by dtrain.
inline constexpr size_t kMaxStateFileBytes = size_t{256} << 20;

/// Reads and checks state.json: must be a JSON object with "version" 1 (a newer version is an
/// error that says to upgrade dtrain). Missing file, bad JSON: errors naming the path. Read with
/// read_regular_file: a symbolic link, a FIFO or a device there, or a file over
/// kMaxStateFileBytes, is an error naming it, never followed, waited on or read.
Result<nlohmann::json> read_state(const RunDirectory& run);
Result<nlohmann::json> read_state_file(const std::string& path);

/// Start time of process `pid` in clock ticks since boot (/proc/<pid>/stat field 22), nullopt
/// when it does not exist or is a zombie.
std::optional<int64_t> process_start_ticks(pid_t pid);

/// process_start_ticks(getpid()): what the supervisor stores as "proc_start_ticks".
int64_t current_process_start_ticks();

/// Whether the supervisor recorded in `state` still runs: its pid exists, is not a zombie, and
/// started at the recorded proc_start_ticks (so a reused pid does not count). When the state
/// names another host than this one, liveness cannot be checked here and true is returned.
/// A state without supervisor pid is not alive.
bool supervisor_alive(const nlohmann::json& state);

/// What to show as the run's state: "state", or "supervisor gone" when it is not terminal and
/// `alive` is false; "unknown" when the state has no "state" string.
std::string display_state(const nlohmann::json& state, bool alive);

}  // namespace dtrain
