#pragma once
// What `dtrain review` reads from one run directory, typed at the boundary: its events.jsonl
// (through runlog's reader: a damaged line is skipped and counted), its spec.yaml (the intent),
// and for a failure without a traceback in its events the tail of the rank's log. A missing or
// unreadable file is a problem line, never an error: the review goes on with what it has.

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "launcher/registry/registry_db.h"
#include "launcher/review/review.h"
#include "launcher/spec/job_spec.h"

namespace dtrain::review {

/// The most log lines kept as one failure's sample.
inline constexpr size_t kSampleLines = 20;

struct RunEvidence {
  std::vector<FailureSample> failures;
  std::vector<RecoveryRecord> recoveries;
  std::vector<ReleaseRecord> releases;
  std::vector<DrillGrade> drills;  ///< drill.verdict events in the run's log
  CheckpointFigures checkpoints;
  std::optional<double> step_ms;   ///< time per step, from consecutive checkpoints
  bool finished = false;           ///< run.finished seen
  spec::IntentSettings intent;     ///< given == false when spec.yaml has none or cannot be read
  int64_t skipped_lines = 0;
  std::vector<std::string> problems;
};

/// Reads run.run_dir. Never fails: what cannot be read is in `problems`.
RunEvidence read_run_evidence(const registry::RunRow& run);

/// A drill's summary as a DrillGrade: a drill.verdict event's report or a drills.jsonl line
/// (the same keys, drill::history_entry), finished at `at`. A key missing or of another type
/// keeps its default; never throws.
DrillGrade drill_grade_of(const nlohmann::json& summary, std::string at);

/// The last `max_lines` lines of the file at `path` (at most its last 16 kB read); empty when it
/// cannot be read (not a regular file, missing).
std::vector<std::string> file_tail(const std::string& path, size_t max_lines);

}  // namespace dtrain::review
