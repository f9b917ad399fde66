#pragma once
// Everything `dtrain report` reads from a run directory, parsed once at the boundary into typed
// values: events.jsonl (through runlog's read_events), state.json, plan-<gen>.json,
// hosts/<host>.json, metrics.jsonl (+ metrics.1.jsonl, the rotated part) and the intent of
// spec.yaml (through the spec loader, launcher/spec). Every file is
// untrusted (docs/architecture.md §6): a damaged line or file is skipped and counted, never a crash, and
// the report says what it skipped.

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "launcher/base/result.h"
#include "launcher/runlog/event_log.h"
#include "launcher/runlog/plan_record.h"
#include "launcher/runlog/run_snapshot.h"
#include "launcher/spec/job_spec.h"
#include "worker/contract/beat_metrics.h"

namespace dtrain::report {

/// What `dtrain report` reads at most of each file (from runlog: plan-<gen>.json
/// kMaxPlanFileBytes, state.json kMaxStateFileBytes, hosts/<host>.json kMaxHostFactsBytes). A file over its bound is named in the report's problems and
/// left out, or for events.jsonl fails the report: it is not what dtrain wrote.
/// events.jsonl is parsed whole into memory; a long run's log is tens of MiB.
inline constexpr uint64_t kMaxEventsFileBytes = uint64_t{512} << 20;
/// metrics.jsonl and metrics.1.jsonl: the supervisor rotates at 64 MiB
/// (RunRecorder::kMetricsMaxBytes); twice that allows a line past the turn.
inline constexpr uint64_t kMaxMetricsFileBytes = uint64_t{128} << 20;

/// spec.yaml: the loader's own bound for a job spec (spec_reader.h kMaxTextFileBytes).
inline constexpr uint64_t kMaxSpecFileBytes = uint64_t{16} << 20;

/// min / median / max of one quantity over the ranks of a summary line.
struct Spread {
  double min = 0, median = 0, max = 0;
};

/// One rank in a metrics line.
struct RankSample {
  int rank = 0;
  int64_t step = 0;
  contract::BeatMetrics metrics;  ///< the metrics a line carries (kInMetricsLine)
};

/// One training line of metrics.jsonl. Up to 64 ranks the supervisor lists every rank; beyond
/// that a summary (spreads) plus only the ranks that stand out ("outliers").
struct TrainingSample {
  int64_t wall_ms = 0;
  int generation = 0;
  std::vector<RankSample> ranks;  ///< every rank, or the outliers of a summary line
  bool summary = false;
  int64_t ranks_reporting = 0;    ///< summary lines
  std::optional<Spread> step;
  /// Summary lines: each beat metric's spread, by its row of contract::kBeatMetrics.
  std::array<std::optional<Spread>, contract::kBeatMetrics.size()> spreads{};
  std::optional<Spread>& spread(std::optional<double> contract::BeatMetrics::*field) {
    return spreads[contract::beat_metric_index(field)];
  }
  const std::optional<Spread>& spread(std::optional<double> contract::BeatMetrics::*field) const {
    return spreads[contract::beat_metric_index(field)];
  }
};

/// One host's resource figures at one time (CPU, memory, GPU...): every numeric field of the
/// line, nested ones named "gpus.0.util" — whatever the agent reports, shown as it is named.
struct HostResources {
  int64_t wall_ms = 0;
  std::string host;  ///< empty for a summary over every host
  std::map<std::string, double> values;
  /// Past 64 hosts the supervisor writes spreads over the hosts instead of each host:
  /// values are then "<figure>.min", ".median" and ".max" (e.g. "host_cpu_percent.max").
  bool summary = false;
  int64_t hosts_reporting = 0;  ///< summary lines
};

/// What one metrics.jsonl line holds: a training sample, resource figures of hosts, or both.
struct MetricsLine {
  std::optional<TrainingSample> training;
  std::vector<HostResources> resources;
};

/// Parses one metrics.jsonl line. Errors say what is wrong ("not valid JSON", "\"ts\" is
/// missing or not a timestamp"); fields of the wrong type are left out, not errors, and a line
/// of a kind this reader does not know is an empty MetricsLine, so that a newer writer's file
/// still shows what this reader knows. Never throws.
Result<MetricsLine> parse_metrics_line(std::string_view line);

/// A host as hosts/<host>.json describes it (the agent's facts at hello).
struct HostFacts {
  std::string name;      ///< the spec's name for the host
  std::string hostname;  ///< what the host calls itself
  std::string version;   ///< its dtrain
  int64_t cpus = 0;
  int64_t memory_mb = 0;
  struct Gpu {
    int64_t index = 0;
    std::string name, uuid;
  };
  std::vector<Gpu> gpus;
  std::string topology;  ///< `nvidia-smi topo -m` as printed, empty when the host has none
};

/// Parses a hosts/<host>.json file; `fallback_name` (from the file name) when it names none.
Result<HostFacts> parse_host_facts(std::string_view text, const std::string& fallback_name);

/// A run directory, read.
struct RunRecord {
  std::string dir;
  std::string run_id;
  std::vector<LoggedEvent> events;  ///< events.jsonl, oldest first (read_logged_events)
  int64_t skipped_event_lines = 0;
  std::optional<RunSnapshot> state;  ///< state.json, when readable
  std::map<int, PlanRecord> plans;      ///< by generation
  std::vector<HostFacts> hosts;         ///< in file-name order
  std::vector<TrainingSample> training;  ///< oldest first
  std::vector<HostResources> resources;  ///< oldest first
  int64_t skipped_metrics_lines = 0;
  /// spec.yaml's intent: (issue 30); intent.given is false when the spec states none.
  spec::IntentSettings intent;
  /// Why spec.yaml's intent could not be read (the file is missing, a link, or does not load);
  /// empty when it was read. Also one of `problems`, unless the file is simply not there.
  std::string intent_unread;
  /// What could not be read, one line each ("state.json: ..."), shown in the report: the first
  /// few skipped lines of each file and every unreadable file.
  std::vector<std::string> problems;
  /// How many of `problems` are whole files left out (plan, host, metrics or state file).
  int64_t unreadable_files = 0;
};

/// metrics.1.jsonl then metrics.jsonl of `dir` into `record` (training, resources, skipped lines
/// and problems), as load_run_record reads them; for readers that want only the metrics.
void read_metrics_files(const std::string& dir, RunRecord& record);

/// The median of every step_ms in `training` (each rank's; a summary line's median), of one
/// generation when `generation` is given. None when there is none.
std::optional<double> median_step_ms(const std::vector<TrainingSample>& training, std::optional<int> generation = std::nullopt);

/// Reads the run directory `dir`. An error only when it is not a run directory at all (no
/// events.jsonl, or one whose header is not dtrain's); everything else that is missing or
/// damaged is noted in `problems` and left out.
Result<RunRecord> load_run_record(const std::string& dir);

}  // namespace dtrain::report
