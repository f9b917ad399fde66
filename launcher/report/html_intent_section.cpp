// report.html's Intent section: the run held against its spec's intent: (intent_grades.h).

#include <algorithm>

#include "launcher/report/html_parts.h"
#include "launcher/report/intent_grades.h"

namespace dtrain::report::page {
namespace {

std::string check_cell(const IntentCheck& check) {
  return std::string("<td class=\"") + (check.met ? "met" : "missed warn") + "\" data-objective=\"" + e(check.objective) +
         "\">" + e(check.measured) + " vs " + e(check.limit) + ": " + (check.met ? "met" : "missed") + "</td>";
}

}  // namespace

std::string intent_section(const RunRecord& record, const ReportLimits& limits) {
  IntentGrades grades = grade_intent(record);
  std::string out = "<section id=\"intent\"><h2>Intent</h2>";
  if (!grades.given) {
    std::string why = grades.unread.empty() ? "This run's spec states no intent (intent: in dtrain-spec(5)), so nothing is graded against one."
                                            : "No intent read: " + grades.unread;
    return out + "<p class=\"no-intent\">" + e(why) + "</p></section>";
  }
  out += "<p class=\"sub\">As stated in the run's spec.yaml:</p><ul class=\"stated\">";
  for (const std::string& line : grades.stated) out += "<li>" + e(line) + "</li>";
  out += "</ul>";
  if (grades.target) {
    out += "<table><tr><th>objective</th><th>held against</th><th>evidence</th></tr><tr class=\"target\">"
           "<td>target duration</td>" + check_cell(*grades.target) + "<td>" + e(grades.target_evidence) + "</td></tr></table>";
  }
  if (grades.recoveries.empty()) return out + "<p class=\"recoveries\">No recovery to grade: the run never recovered from a failure.</p></section>";
  size_t missed = 0;
  for (const RecoveryAgainstIntent& recovery : grades.recoveries) {
    missed += std::any_of(recovery.checks.begin(), recovery.checks.end(), [](const IntentCheck& c) { return !c.met; }) ? 1 : 0;
  }
  out += "<p class=\"recoveries\">" + std::to_string(grades.recoveries.size()) +
         (grades.recoveries.size() == 1 ? " recovery, " : " recoveries, ") + std::to_string(missed) +
         " of them missing an objective of intent.recovery. Time to train again: from the failure (failure.detected less its "
         "latency) to the new generation's first step; time lost: steps lost × the failed generation's median step time "
         "(metrics.jsonl).</p>";
  out += "<table><tr><th>gen</th><th>cause</th><th>time to train again</th><th>steps lost</th><th>time lost</th><th>action</th>";
  const std::vector<IntentCheck>& first = grades.recoveries.front().checks;
  for (const IntentCheck& check : first) out += "<th>" + e(check.objective) + "</th>";
  out += "<th>evidence</th></tr>";
  size_t shown = std::min(grades.recoveries.size(), limits.table_rows);
  for (size_t i = 0; i < shown; ++i) {
    const RecoveryAgainstIntent& recovery = grades.recoveries[i];
    out += "<tr class=\"recovery-intent\" data-gen=\"" + std::to_string(recovery.generation) + "\"><td class=\"n\">" +
           std::to_string(recovery.generation) + "</td><td>" + e(recovery.cause) + "</td><td class=\"n\">" +
           e(recovery.time_to_train_ms ? human_ms(*recovery.time_to_train_ms) : "unknown") + "</td><td class=\"n\">" +
           std::to_string(recovery.steps_lost) + "</td><td class=\"n\">" +
           e(recovery.lost_ms ? human_ms(*recovery.lost_ms) : "unknown") + "</td><td>" +
           e(recovery.action.empty() ? "unknown" : recovery.action) + "</td>";
    for (const IntentCheck& check : recovery.checks) out += check_cell(check);
    out += "<td>" + e(recovery.evidence) + "</td></tr>";
  }
  out += "</table>";
  if (shown < grades.recoveries.size()) {
    out += "<p class=\"note\">" + std::to_string(grades.recoveries.size() - shown) + " more recoveries not listed.</p>";
  }
  return out + "</section>";
}

}  // namespace dtrain::report::page
