#pragma once
// The result of one `dtrain drill`: every fault's verdict plus what the drill saw of the run,
// as JSON (drill.verdict event, --json, drills.jsonl) and as the human table.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "launcher/base/exit_code.h"
#include "launcher/drill/grading.h"

namespace dtrain::drill {

struct DrillReport {
  std::string drill_id;               ///< "drill-YYYYMMDD-HHMMSS-xxxx"
  std::string mode;                   ///< "live" (against a running run) or "spec" (--spec)
  std::string run_id;                 ///< empty when the drill failed before a run existed
  std::string spec_path;              ///< --spec mode: the drill spec
  int64_t started_wall_ms = 0;
  int64_t finished_wall_ms = 0;
  Objectives objectives;
  /// How the objectives were completed from the job's intent, or why they could not be ("the
  /// run's spec.yaml does not load: ..."); empty when the intent had nothing to add.
  std::string objectives_note;
  std::vector<FaultVerdict> faults;
  std::string final_state;            ///< the run's state when the drill ended
  bool cleanup_checked = false;       ///< --spec mode: looked for processes of the run at the end
  std::vector<int> leftover_pids;     ///< processes with DTRAIN_RUN_ID=<run> still alive then
  /// Why the drill itself could not run (exit 3): run never trained, injection refused, ...
  std::optional<std::string> error;
  /// The error was the user's (the job spec `dtrain submit` refused): exit usage (2), not 3.
  bool error_is_usage = false;

  /// No error, every fault passed, nothing of the run left behind, and in --spec mode the job
  /// ended "succeeded".
  bool passed() const;
  /// ok (0) when passed, job_failed (1) when an objective or check was missed, infra (3) when
  /// the drill could not run, usage (2) when that was because the job spec was refused.
  ExitCode exit_code() const;
  /// "pass", "fail" or "error".
  std::string verdict() const;
};

/// Where `dtrain drill` writes the run's HTML report (`dtrain report`) for this verdict:
/// <run dir>/report.html; empty when the drill failed before a run existed.
std::string report_path(const DrillReport& report);

/// The drill.verdict event body (without "ev"/"ts") and `--json` output; "report" names
/// report_path() when there is a run.
nlohmann::json to_json(const DrillReport& report);

/// The human table: per fault, the timeline, phases, objectives and checks; then the verdict.
std::string format_report(const DrillReport& report);

}  // namespace dtrain::drill
