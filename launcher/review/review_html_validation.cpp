// review.html's validation sections (review_html.h): drills, failures with their samples,
// recoveries with their phases, checkpoints, and the resources released after every retry.

#include <algorithm>
#include <map>

#include "launcher/base/strings.h"
#include "launcher/report/html_parts.h"
#include "launcher/report/html_report.h"
#include "launcher/review/review_html.h"

namespace dtrain::review::html {
namespace {

using report::html_escape;
using report::page::fixed;
using report::page::human_bytes;
using report::page::human_ms;
using report::page::px;

/// Failure samples and recovery bars shown; the JSON holds every one.
constexpr size_t kMostRows = 200;

std::string e(const std::string& text) { return html_escape(text); }

const char* phase_color(const std::string& phase) {
  static const std::map<std::string, const char*> colors = {
      {"detect", "#ef6c00"}, {"stop", "#78909c"}, {"replan", "#1565c0"}, {"spawn", "#2e7d32"},
      {"rendezvous", "#00838f"}, {"first_step", "#7cb342"}, {"state_and_first_step", "#9ccc65"}};
  auto found = colors.find(phase);
  return found == colors.end() ? "#8d6e63" : found->second;
}

std::string drills_section(const Review& review) {
  std::string out = section_start(review, "drills");
  if (review.validation.drills.empty()) {
    return out + "<p class=\"empty\">No drill in this period: recovery is not proven (dtrain drill RUN --fault "
                 "kill-rank:1, or a nightly dtrain drill --spec).</p></section>";
  }
  std::vector<std::vector<std::string>> rows;
  for (const DrillGrade& drill : review.validation.drills) {
    std::string verdict = drill.verdict == "pass" ? "met" : "missed";
    rows.push_back({e(drill.at), e(drill.drill_id), e(drill.run_id), e(drill.tenant.empty() ? "-" : drill.tenant),
                    e(drill.mode), "<span class=\"" + verdict + "\" data-grade=\"" + e(drill.verdict) + "\">" + e(drill.verdict) + "</span>",
                    e(join(drill.faults, ", ")), e(drill.missed.empty() ? "-" : join(drill.missed, "; ")),
                    std::to_string(drill.leftover_processes), e(drill.from)});
  }
  return out + table({"finished", "drill", "run", "tenant", "mode", "grade", "faults", "missed", "#leftovers", "from"},
                     rows, "drills") + "</section>";
}

std::string failures_section(const Review& review) {
  std::string out = section_start(review, "failures");
  if (review.no_runs) return out + no_runs_note() + "</section>";
  const std::vector<FailureSample>& failures = review.validation.failures;
  if (failures.empty()) return out + "<p class=\"empty\">No failure in the runs in scope.</p></section>";
  std::vector<std::vector<std::string>> rows;
  for (size_t i = 0; i < failures.size() && i < kMostRows; ++i) {
    const FailureSample& failure = failures[i];
    std::string sample = failure.sample.empty()
                             ? "<span class=\"empty\">no sample: no traceback, exit tail or rank log</span>"
                             : "<pre>" + e(join(failure.sample, "\n")) + "</pre><span class=\"source\">from " +
                                   e(failure.sample_from) + "</span>";
    rows.push_back({e(failure.at), e(failure.run_id), e(failure.tenant.empty() ? "-" : failure.tenant),
                    std::to_string(failure.generation), e(failure.kind), e(failure.host),
                    failure.rank >= 0 ? std::to_string(failure.rank) : "-", failure.root_cause ? "root cause" : "cascade",
                    e(failure.detail), sample});
  }
  out += table({"when", "run", "tenant", "#gen", "kind", "host", "#rank", "root cause?", "detail", "sample"}, rows, "failures");
  if (failures.size() > kMostRows) {
    out += "<p class=\"source\">" + std::to_string(failures.size() - kMostRows) + " more in --json.</p>";
  }
  return out + "</section>";
}

/// One stacked bar per recovery, the phases in the order they happened.
std::string recovery_bars(const std::vector<RecoveryRecord>& recoveries) {
  int64_t longest = 1;
  for (const RecoveryRecord& recovery : recoveries) longest = std::max(longest, recovery.total_ms);
  const double left = 300, width = 760, row = 18;
  size_t shown = std::min(recoveries.size(), kMostRows);
  std::string svg = "<svg class=\"chart\" data-chart=\"recovery phases\" width=\"" + px(left + width + 80) + "\" height=\"" +
                    px(row * static_cast<double>(shown) + 8) + "\">";
  for (size_t i = 0; i < shown; ++i) {
    const RecoveryRecord& recovery = recoveries[i];
    double y = row * static_cast<double>(i) + 4, x = left;
    svg += "<text x=\"0\" y=\"" + px(y + 12) + "\">" + e(recovery.run_id.substr(0, 28) + " gen " + std::to_string(recovery.generation)) +
           "</text>";
    for (const RecoveryPhase& phase : recovery.phases) {
      double w = width * static_cast<double>(phase.ms) / static_cast<double>(longest);
      svg += "<rect x=\"" + px(x) + "\" y=\"" + px(y) + "\" width=\"" + px(std::max(0.5, w)) + "\" height=\"14\" fill=\"" +
             phase_color(phase.name) + "\"><title>" + e(phase.name + " " + human_ms(phase.ms)) + "</title></rect>";
      x += w;
    }
    svg += "<text x=\"" + px(x + 4) + "\" y=\"" + px(y + 12) + "\">" + e(human_ms(recovery.total_ms)) + "</text>";
  }
  svg += "</svg><p class=\"legend\">";
  for (const char* phase : {"detect", "stop", "replan", "spawn", "rendezvous", "first_step"}) {
    svg += "<span style=\"color:" + std::string(phase_color(phase)) + "\">&#9632;</span> " + phase + " &nbsp;";
  }
  return svg + "</p>";
}

std::string recoveries_section(const Review& review) {
  std::string out = section_start(review, "recoveries");
  if (review.no_runs) return out + no_runs_note() + "</section>";
  const std::vector<RecoveryRecord>& recoveries = review.validation.recoveries;
  if (recoveries.empty()) return out + "<p class=\"empty\">No recovery in the runs in scope.</p></section>";
  out += recovery_bars(recoveries);
  std::vector<std::vector<std::string>> rows;
  for (size_t i = 0; i < recoveries.size() && i < kMostRows; ++i) {
    const RecoveryRecord& recovery = recoveries[i];
    std::vector<std::string> phases;
    for (const RecoveryPhase& phase : recovery.phases) phases.push_back(phase.name + " " + human_ms(phase.ms));
    rows.push_back({e(recovery.at), e(recovery.run_id), std::to_string(recovery.generation), e(recovery.action),
                    e(recovery.cause_kind + (recovery.cause_host.empty() ? "" : " on " + recovery.cause_host)),
                    e(human_ms(recovery.total_ms)), std::to_string(recovery.steps_lost), e(join(phases, ", ")),
                    e(recovery.fallback.empty() ? "-" : recovery.fallback)});
  }
  return out + table({"when", "run", "#gen", "action", "cause", "#total", "#steps lost", "phases", "fell back"}, rows,
                     "recoveries") + "</section>";
}

std::string checkpoints_section(const Review& review) {
  std::string out = section_start(review, "checkpoints");
  if (review.no_runs) return out + no_runs_note() + "</section>";
  if (review.validation.checkpoints.empty()) return out + "<p class=\"empty\">No checkpoint in the runs in scope.</p></section>";
  auto known = [](int64_t value, const std::string& text) { return value < 0 ? std::string("-") : text; };
  std::vector<std::vector<std::string>> rows;
  for (const CheckpointFigures& run : review.validation.checkpoints) {
    rows.push_back({e(run.run_id), e(run.tenant.empty() ? "-" : run.tenant), std::to_string(run.checkpoints),
                    std::to_string(run.rejected), known(run.interval_steps, std::to_string(run.interval_steps)),
                    known(run.interval_ms, e(human_ms(run.interval_ms))),
                    known(run.bytes, e(human_bytes(static_cast<double>(run.bytes)))),
                    run.save_seconds < 0 ? "-" : fixed(run.save_seconds, 3) + " s",
                    known(run.restore_ms, e(human_ms(run.restore_ms)))});
  }
  return out + table({"run", "tenant", "#checkpoints", "#rejected", "#interval (steps)", "#interval (time)", "#size",
                      "#save", "#restore"}, rows) + "<p class=\"source\">Medians over each run's checkpoints.</p></section>";
}

std::string releases_section(const Review& review) {
  std::string out = section_start(review, "releases");
  if (review.no_runs) return out + no_runs_note() + "</section>";
  const Validation& validation = review.validation;
  out += validation.leftovers == 0
             ? "<p class=\"leftovers\" data-leftovers=\"0\">Leftovers: none.</p>"
             : "<p class=\"leftovers warn\" data-leftovers=\"" + std::to_string(validation.leftovers) + "\">Leftovers: " +
                   std::to_string(validation.leftovers) + " (must be none).</p>";
  if (validation.releases.empty()) return out + "<p class=\"empty\">No release recorded (no retry).</p></section>";
  std::vector<std::vector<std::string>> rows;
  for (const ReleaseRecord& release : validation.releases) {
    std::string remaining = release.unconfirmed ? "<span class=\"warn\">unconfirmed</span>"
                            : release.remaining > 0 ? "<span class=\"warn\">" + std::to_string(release.remaining) + "</span>"
                                                    : "0";
    rows.push_back({e(release.at), e(release.run_id), std::to_string(release.generation), e(release.host),
                    std::to_string(release.killed), remaining, e(human_ms(release.ms)), e(release.detail)});
  }
  return out + table({"when", "run", "#gen", "host", "#killed", "#remaining", "#took", "detail"}, rows, "releases") +
         "</section>";
}

}  // namespace

std::string validation_sections(const Review& review) {
  return drills_section(review) + failures_section(review) + recoveries_section(review) + checkpoints_section(review) +
         releases_section(review);
}

}  // namespace dtrain::review::html
