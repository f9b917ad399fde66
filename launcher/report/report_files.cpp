#include "launcher/report/report_files.h"

#include "launcher/base/fd.h"
#include "launcher/report/run_record.h"
#include "launcher/report/timeline.h"
#include "launcher/report/trace_json.h"
#include "launcher/base/json_fields.h"

namespace dtrain::report {

Result<ReportFiles> write_report(const std::string& run_dir, std::string html_path, std::string trace_path,
                                 const ReportLimits& limits, int file_mode) {
  Result<RunRecord> record = load_run_record(run_dir);
  if (!record) return record.error();
  Timeline timeline = build_timeline(*record);
  if (html_path.empty()) html_path = run_dir + "/report.html";
  if (trace_path.empty()) {
    size_t slash = html_path.find_last_of('/');
    trace_path = (slash == std::string::npos ? std::string() : html_path.substr(0, slash + 1)) + "timeline.json";
  }
  std::string html = render_html(*record, timeline, limits);
  std::string trace = json_compact(chrome_trace(*record, timeline));
  // Owner only unless the caller shares it (--mode 0644 for a web server): a report names hosts,
  // commands and paths. write_file_atomic's temp file cannot be pre-created or be a planted link.
  if (Status written = write_file_atomic(html_path, html, file_mode); !written) return written.error();
  if (Status written = write_file_atomic(trace_path, trace, file_mode); !written) return written.error();
  return ReportFiles{html_path, trace_path, html.size(), trace.size(), static_cast<int64_t>(record->events.size()),
                     record->skipped_event_lines + record->skipped_metrics_lines, record->unreadable_files};
}

}  // namespace dtrain::report
