#pragma once
// $DTRAIN_HOME/drills.jsonl: one line per drill, so that a nightly drill's trend can be seen
// (`dtrain drill --history`). Line 1 is a version header, {"dtrain_drills":1}; each later line
// is a summary: {"ts","drill_id","mode","run_id","verdict","exit_code","faults":[{"fault",
// "target","verdict","detect_ms","recover_ms","steps_lost"}],"missed":[...]}.

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "launcher/base/result.h"
#include "launcher/drill/drill_report.h"

namespace dtrain::drill {

inline constexpr int kDrillHistoryVersion = 1;

/// dtrain_home() + "/drills.jsonl".
std::string drill_history_path();

/// The history line for `report`.
nlohmann::json history_entry(const DrillReport& report);

/// Appends history_entry(report) to `path` (created with its header, mode 0600, when missing)
/// in one O_APPEND write.
Status append_drill_history(const std::string& path, const DrillReport& report);

/// Every entry, oldest first. A missing file is an empty history; a bad header or an unknown
/// version is an error naming the file; a broken line is skipped (a writer killed mid-line).
Result<std::vector<nlohmann::json>> read_drill_history(const std::string& path);

/// The entries as a table: one row per fault, newest drill last.
std::string format_history(const std::vector<nlohmann::json>& entries);

}  // namespace dtrain::drill
