#pragma once
// RunSnapshot: state.json as one typed struct. The supervisor rewrites it on every change
// (launcher/run's SnapshotWriter::write_state builds it, the StateWriter writes it off the
// loop); `dtrain status`, `logs`, `stop`, `resume`, drills, the report and the registry read it. to_json(), text() and
// from_json() below are the only code that names a key of state.json: readers use the fields.
//
// The format, version 1. A key absent in a file keeps the field's default (an older dtrain
// wrote fewer of them), an unknown key is ignored, a value of another type is an error naming
// the field, and a newer "version" is an error that says to upgrade dtrain:
// {
//   "version": 1,
//   "run_id": "train-20261129-234101-a3f2", "name": "train", "tenant": "team-a" | null,
//   "user": "alice" (absent: this dtrain names the user in run.submitted),
//   "state": "connecting|launching|running|recovering|stopping|succeeded|failed|stopped",
//   "exit_code": int | null,          // set when terminal (launcher/base/exit_code.h)
//   "generation": int, "world_size": int, "restarts": int,
//   "hosts": [{"name": "gpu01", "state": "connecting|connected|lost|excluded", "spare": bool,
//              "agent_pid": int (only when the agent is a local child)}],
//   "excluded_hosts": ["gpu03"],
//   "supervisor": {"pid": int, "hostname": "login1", "started_at_ms": int,
//                  "proc_start_ticks": int},   // /proc/<pid>/stat field 22, against pid reuse
//   "submitted_at_ms": int, "resumed_at_ms": int | null, "finished_at_ms": int | null,
//   "updated_at_ms": int,
//   "ranks": [{"rank": int, "host": "gpu01", "local_rank": int, "dp": int, "pp": int, "tp": int,
//              "pid": int | null, "state": "pending|starting|running|exited|failed|killed",
//              "step": int | null, "last_beat_ms": int | null, "loss": number | null,
//              "step_ms": number (absent when unknown),
//              "exit": null | {"code": int} | {"signal": "SIGKILL"}}],   // last in the file
//   "last_recovery": null | the recovery.completed event as events.jsonl holds it, with "gen",
//   "last_checkpoint_step": int | null,
//   "hang_timeout": the hang timeouts in force, as a hang_timeout.changed event holds them
//                   (launcher/supervisor/hang_timeouts.h; "basis" "spec" when the spec sets them;
//                   absent before the first generation, and from an older dtrain),
//   "stack": [the stack.consistency events as events.jsonl holds them: the hosts compared before
//             the first generation, then each spare left out] (absent when nothing was compared),
//   "health": [each host's newest host.health event as events.jsonl holds it] (absent when no
//              agent was asked to check its host),
//   "quarantined": [hosts this run quarantined (host.quarantined)] (absent when none),
//   "root_cause": null | {"kind" (a failure kind's name, events::FailureKind), "host", "message",
//                         "rank", "local_rank", "log" (these three with a rank), "pid",
//                         "code" | "signal", "traceback"},
//   "stragglers": [{"rank": int, "host", "score": number, "median_step_ms": number}],
//   "goodput": {metrics::Goodput's JSON: "ratio", "wall_seconds", "lost_seconds": {...}, ...},
//   "total_steps": int (absent: this dtrain does not write it; `status --watch` takes it),
//   "spec_path": "/path/to/run/spec.yaml",
//   "detached": bool
// }
// Numbers that are not finite (a loss of NaN) are written as null.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "launcher/base/result.h"
#include "launcher/events/events.h"
#include "worker/contract/beat_metrics.h"

namespace dtrain {

/// The state.json format this dtrain writes and reads.
inline constexpr int kRunStateVersion = 1;

struct RunSnapshot {
  /// Who supervises the run, so that a reader can tell whether it still runs (supervisor_alive).
  struct Supervisor {
    int pid = 0;
    std::string hostname{};
    int64_t started_at_ms = 0;
    /// The process's start time (/proc/<pid>/stat field 22): a reused pid is not the supervisor.
    std::optional<int64_t> proc_start_ticks{};
    nlohmann::json to_json() const;
    static Result<Supervisor> from_json(const nlohmann::json& object);
    bool operator==(const Supervisor&) const = default;
  };

  struct Host {
    std::string name{};
    std::string state{};  ///< connecting, connected, lost, excluded
    bool spare = false;
    std::optional<int64_t> agent_pid{};  ///< only an agent that is a local child process has one here
    nlohmann::json to_json() const;
    static Result<Host> from_json(const nlohmann::json& object);
    bool operator==(const Host&) const = default;
  };

  /// How a rank's worker ended: its exit code, or the signal that killed it.
  struct RankExit {
    std::optional<int> code{};
    std::optional<std::string> signal{};  ///< "SIGKILL"
    nlohmann::json to_json() const;
    static Result<RankExit> from_json(const nlohmann::json& object);
    bool operator==(const RankExit&) const = default;
  };

  /// One rank of the current plan (RankProgressTable::state_rows builds these).
  struct Rank {
    int rank = 0;
    std::string host{};
    int local_rank = 0, dp = 0, pp = 0, tp = 0;
    std::optional<int64_t> pid{};  ///< none before its worker started
    std::string state{};           ///< pending, starting, running, exited, failed, killed
    std::optional<int64_t> step{};
    std::optional<int64_t> last_beat_ms{};  ///< wall clock of its newest beat
    /// Its newest beat's metrics that state.json carries (shown kInStateJson), each written
    /// only when set.
    contract::BeatMetrics metrics{};
    std::optional<RankExit> exit{};
    nlohmann::json to_json() const;
    static Result<Rank> from_json(const nlohmann::json& object);
    bool operator==(const Rank&) const = default;
  };

  /// What made the run fail (or, once it recovered, the last failure).
  struct RootCause {
    events::FailureKind kind = events::FailureKind::worker_exit;  ///< written by its catalogue name
    std::string host{};
    std::string message{};
    std::optional<int> rank{};
    std::optional<int> local_rank{};
    std::optional<std::string> log{};  ///< the rank's log file
    std::optional<int64_t> pid{};
    std::optional<int> code{};
    std::optional<std::string> signal{};
    std::optional<std::string> traceback{};  ///< from the rank's error file
    nlohmann::json to_json() const;
    static Result<RootCause> from_json(const nlohmann::json& object);
    bool operator==(const RootCause&) const = default;
  };

  /// A rank slower than the fastest (metrics.straggler_threshold).
  struct Straggler {
    int rank = 0;
    std::string host{};
    double score = 1.0;
    double median_step_ms = 0;
    nlohmann::json to_json() const;
    static Result<Straggler> from_json(const nlohmann::json& object);
    bool operator==(const Straggler&) const = default;
  };

  /// The newest recovery: its recovery.completed event as the run log holds it, and the
  /// generation it completed in.
  struct Recovery {
    int gen = 0;
    events::RecoveryCompleted completed{};
    nlohmann::json to_json() const;
    static Result<Recovery> from_json(const nlohmann::json& object);
    bool operator==(const Recovery&) const = default;
  };

  std::string run_id{};
  std::string name{};
  std::string tenant{};  ///< empty: none (null in the file)
  /// Who ran it. This dtrain names the user in run.submitted instead and leaves it out (empty);
  /// the registry takes it from a file that has it when no event says.
  std::string user{};
  std::string state{};   ///< empty when the file has none; display_state() says "unknown"
  std::optional<int> exit_code{};
  int generation = 0;
  int world_size = 0;
  int restarts = 0;
  std::vector<Host> hosts{};  ///< the spec's hosts, then its spares
  std::vector<std::string> excluded_hosts{};
  std::optional<Supervisor> supervisor{};
  std::optional<int64_t> submitted_at_ms{};
  std::optional<int64_t> resumed_at_ms{};  ///< set by `dtrain resume`
  std::optional<int64_t> finished_at_ms{};
  std::optional<int64_t> updated_at_ms{};
  std::vector<Rank> ranks{};
  std::optional<Recovery> last_recovery{};
  std::optional<int64_t> last_checkpoint_step{};
  /// The hang timeouts in force (status's "hang timeout" line, the report's).
  std::optional<events::HangTimeoutChanged> hang_timeout{};
  /// The software stacks compared (spec consistency): status's "stack" line, the report's.
  std::vector<events::StackConsistency> stack{};
  /// Each host's newest health checks (status's "health" lines, metrics.prom's dtrain_host_health).
  std::vector<events::HostHealth> health{};
  std::vector<std::string> quarantined{};
  std::optional<RootCause> root_cause{};
  std::vector<Straggler> stragglers{};
  /// metrics::Goodput's own JSON, kept whole: runlog cannot see launcher/metrics, and no reader
  /// of state.json looks inside it. Null when absent; an object otherwise.
  nlohmann::json goodput = nullptr;
  std::optional<int64_t> total_steps{};  ///< how many steps the job trains, when it says
  std::string spec_path{};
  bool detached = false;

  /// The snapshot as state.json holds it, "version" included.
  nlohmann::json to_json() const;
  /// state.json's text: to_json() written with two-space indents and "ranks" last, one rank a
  /// line. The ranks are written straight into the text, never as JSON values: built as nlohmann
  /// objects, 16,384 ranks took 300-600 ms per snapshot (scripts/bench/sim.py at 2,048 hosts).
  /// json::parse(text()) == to_json().
  std::string text() const;
  /// Reads state.json's object. Errors: not an object, no "version" or one this dtrain does not
  /// read (a newer one says to upgrade), a field of another type ("ranks[3]: pid: expected an
  /// integer, got ..."). Never throws. from_json(to_json(s)) == s.
  static Result<RunSnapshot> from_json(const nlohmann::json& state);
  bool operator==(const RunSnapshot&) const = default;
};

/// from_json(json::parse(text)) for state.json's text as dtrain writes it, on simdjson's DOM:
/// every rank's fields with the types the writer gives them (the rest of the file, small, goes
/// through from_json). Anything else (a rank field of another type, a number written as 3.0, a
/// file that is not JSON or whose head from_json refuses) is nullopt, and the generic path
/// decides and words the error. `dtrain status` reads a 131,072-rank state.json (36 MB) so in a
/// fraction of the time nlohmann's DOM takes to build. fuzz/run_snapshot holds the two equal.
std::optional<RunSnapshot> read_plain_state(std::string_view text);

}  // namespace dtrain
