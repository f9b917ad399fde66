#pragma once
// `dtrain report`'s work, for the CLI and for `dtrain drill`: read a run directory, write
// report.html and timeline.json (each atomically: a reader sees the old file or the new one).

#include <cstddef>
#include <cstdint>
#include <string>

#include "launcher/base/result.h"
#include "launcher/report/html_report.h"

namespace dtrain::report {

struct ReportFiles {
  std::string html_path;
  std::string trace_path;
  size_t html_bytes = 0;
  size_t trace_bytes = 0;
  int64_t events = 0;
  int64_t skipped_lines = 0;  ///< damaged lines of events.jsonl and metrics.jsonl left out
  /// Files of the run directory left out (a link, a FIFO, over its bound, unparsable), each named
  /// under "What could not be read" at the end of the page.
  int64_t unreadable_files = 0;
};

/// Mode of report.html and timeline.json unless asked otherwise (dtrain report --mode): a report
/// shows hosts, commands, paths and root-cause messages, for the run's owner until they share it.
inline constexpr int kDefaultReportMode = 0600;

/// `html_path` empty: <run_dir>/report.html; `trace_path` empty: timeline.json next to the
/// HTML file; both written with exactly `file_mode`. Errors: not a run directory, or its
/// events.jsonl cannot be read (user), a file that cannot be written (infra).
Result<ReportFiles> write_report(const std::string& run_dir, std::string html_path = "", std::string trace_path = "",
                                 const ReportLimits& limits = {}, int file_mode = kDefaultReportMode);

}  // namespace dtrain::report
