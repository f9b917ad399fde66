// review.html (review_html.h): the page, the current-state, decision and operations sections.
// The validation sections are in review_html_validation.cpp.

#include "launcher/review/review_html.h"

#include <algorithm>
#include <cstdio>

#include "launcher/base/strings.h"
#include "launcher/report/html_parts.h"
#include "launcher/report/html_report.h"

namespace dtrain::review {

using report::html_escape;
using report::page::fixed;
using report::page::px;

namespace {

constexpr const char* kStyle = R"(
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0;color:#1d232b;background:#f4f6f8}
main{max-width:1200px;margin:0 auto;padding:16px 20px 40px}
h1{font-size:22px;margin:8px 0 2px}h2{font-size:18px;margin:30px 0 6px;text-transform:capitalize;color:#243447}
h3{font-size:15px;margin:6px 0 2px}
nav a{margin-right:14px}
.sub{color:#5b6573;margin:0 0 10px}
section{background:#fff;border:1px solid #e1e4e8;border-radius:6px;padding:6px 16px 12px;margin:12px 0}
.source{color:#5b6573;font-size:12px;margin:0 0 8px}
table{border-collapse:collapse;font-size:13px;margin:6px 0}th,td{padding:3px 10px 3px 0;text-align:left;vertical-align:top}
th{color:#5b6573;font-weight:600;border-bottom:1px solid #d5d9df}td.n{text-align:right;font-variant-numeric:tabular-nums}
pre{background:#f2f4f7;padding:6px;overflow:auto;font-size:11px;max-height:180px;margin:2px 0;max-width:640px}
.figures span{display:inline-block;margin:4px 18px 4px 0}.figures b{font-size:18px;display:block}
.verdict{font-weight:700;padding:2px 8px;border-radius:4px;white-space:nowrap}
.go{background:#dcf5e3;color:#11652b}.not-yet{background:#fff2cc;color:#6b4e00}.stop{background:#fde0de;color:#8c1d18}
.met{color:#11652b}.missed{color:#8c1d18;font-weight:600}.not-tested{color:#5b6573}
.empty{color:#5b6573;font-style:italic}.warn{color:#8c1d18;font-weight:600}
svg{display:block;margin:6px 0}svg text{font:11px system-ui,sans-serif;fill:#3b4450}
)";

std::string e(const std::string& text) { return html_escape(text); }

std::string css_of(const std::string& word) {
  std::string css = word;
  std::replace(css.begin(), css.end(), ' ', '-');
  return css;
}

/// Busy % per day (or per week) as bars, 0-100 % (above 100 % clipped, the label says it).
std::string busy_chart(const std::vector<std::pair<std::string, double>>& bars, const std::string& label) {
  if (bars.empty()) return "";
  const double width = 1100, height = 140, left = 40, bottom = 24;
  double bar = (width - left) / static_cast<double>(bars.size());
  std::string svg = "<svg class=\"chart\" data-chart=\"" + e(label) + "\" width=\"" + px(width) + "\" height=\"" +
                    px(height + bottom) + "\" role=\"img\" aria-label=\"" + e(label) + "\">";
  for (int tick : {0, 50, 100}) {
    double y = height - height * tick / 100.0;
    svg += "<path d=\"M" + px(left) + " " + px(y) + "h" + px(width - left) + "\" stroke=\"#e1e4e8\"/><text x=\"2\" y=\"" +
           px(y + 4) + "\">" + std::to_string(tick) + " %</text>";
  }
  for (size_t i = 0; i < bars.size(); ++i) {
    double fraction = std::clamp(bars[i].second, 0.0, 1.0);
    double x = left + bar * static_cast<double>(i);
    svg += "<rect x=\"" + px(x + 1) + "\" y=\"" + px(height - height * fraction) + "\" width=\"" +
           px(std::max(1.0, bar - 2)) + "\" height=\"" + px(height * fraction) + "\" fill=\"#1565c0\"><title>" +
           e(bars[i].first) + ": " + html::percent(bars[i].second) + "</title></rect>";
    if (bars.size() <= 12 || i % (bars.size() / 8 + 1) == 0) {
      svg += "<text x=\"" + px(x + 1) + "\" y=\"" + px(height + 16) + "\">" + e(bars[i].first.substr(5)) + "</text>";
    }
  }
  return svg + "</svg>";
}

std::string figure(const std::string& value, const std::string& label) {
  return "<span><b>" + value + "</b>" + label + "</span>";
}

std::string hosts_section(const Review& review) {
  const CurrentState& current = review.current;
  std::string out = html::section_start(review, "hosts");
  if (review.no_runs) return out + html::no_runs_note() + "</section>";
  out += "<div class=\"figures\">" + figure(std::to_string(current.hosts), "hosts used") +
         figure(std::to_string(current.gpus), "GPUs") + figure(std::to_string(current.slots), "CPU worker slots") +
         figure(html::hours(current.gpu_hours), "GPU-hours held") + figure(html::hours(current.slot_hours), "slot-hours held") +
         figure(html::percent(current.busy_fraction), "busy (held / capacity × hours)") + "</div>";
  std::vector<std::pair<std::string, double>> days;
  for (const DayBusy& day : current.days) days.emplace_back(day.day, day.busy_fraction);
  out += busy_chart(days, "busy % of the hosts used, per UTC day");
  std::vector<std::vector<std::string>> rows;
  for (const HostUse& host : current.hosts_used) {
    rows.push_back({e(host.host), host.resource == "gpu" ? "GPU" : "slot", std::to_string(host.units),
                    html::hours(host.unit_hours), html::percent(host.busy_fraction), std::to_string(host.runs),
                    std::to_string(host.failures), std::to_string(host.root_cause_failures)});
  }
  out += html::table({"host", "unit", "#units", "#unit-hours", "#busy", "#runs", "#failures", "#root causes"}, rows);
  return out + "</section>";
}

std::string runs_section(const Review& review) {
  std::string out = html::section_start(review, "runs");
  if (review.no_runs) return out + html::no_runs_note() + "</section>";
  out += "<div class=\"figures\">" + figure(std::to_string(review.current.runs), "runs") +
         figure(std::to_string(review.current.tenants), "tenants") + "</div>";
  std::vector<std::vector<std::string>> rows;
  for (const auto& [state, count] : review.current.runs_by_state) rows.push_back({e(state), std::to_string(count)});
  return out + html::table({"state", "#runs"}, rows) + "</section>";
}

std::string causes_section(const Review& review) {
  std::string out = html::section_start(review, "failure-causes");
  if (review.no_runs) return out + html::no_runs_note() + "</section>";
  if (review.current.top_failure_causes.empty()) return out + "<p class=\"empty\">No failure.</p></section>";
  std::vector<std::vector<std::string>> rows;
  for (const FailureCauseCount& cause : review.current.top_failure_causes) {
    rows.push_back({e(cause.kind), std::to_string(cause.count), e(join(cause.hosts, ", "))});
  }
  return out + html::table({"cause", "#root-cause failures", "hosts they came from"}, rows) + "</section>";
}

std::string objectives_section(const Review& review) {
  std::string out = html::section_start(review, "objectives");
  if (review.no_runs) return out + html::no_runs_note() + "</section>";
  std::vector<std::vector<std::string>> rows;
  for (const RunObjectives& run : review.decision.runs) {
    std::string who = e(run.run_id) + "<br><span class=\"source\">" + e(run.tenant.empty() ? "(no tenant)" : run.tenant) +
                      (run.name.empty() ? "" : " · " + e(run.name)) + "</span>";
    if (!run.intent_given) {
      rows.push_back({who, "<span class=\"not-tested\">no intent stated</span>", "", "", ""});
      continue;
    }
    for (const ObjectiveResult& result : run.objectives) {
      rows.push_back({who, e(result.objective), e(result.wanted),
                      "<span class=\"" + css_of(result.status) + "\">" + e(result.status) + "</span>", e(result.evidence)});
      who = "";
    }
  }
  return out + html::table({"run", "objective", "wanted", "status", "evidence"}, rows, "objectives") + "</section>";
}

std::string pilot_section(const Review& review) {
  const PilotData& data = review.decision.data;
  std::string out = html::section_start(review, "pilot-data");
  if (review.no_runs) return out + html::no_runs_note() + "</section>";
  out += "<p class=\"pilot\" data-enough=\"" + std::string(data.enough ? "yes" : "no") + "\">" +
         (data.enough ? "Yes: " : "<span class=\"warn\">No:</span> ") + "the runs in scope span " + fixed(data.days, 1) +
         " days (first submitted " + e(data.first_run) + ", last " + e(data.last_run) + "); the pilot asks for " +
         std::to_string(data.required_days) + ".</p>";
  std::vector<std::vector<std::string>> rows;
  for (const TenantVerdict& tenant : review.decision.tenants) {
    rows.push_back({e(tenant.tenant.empty() ? "(none)" : tenant.tenant), fixed(tenant.data.days, 1),
                    tenant.data.enough ? "yes" : "no", e(tenant.data.first_run), e(tenant.data.last_run)});
  }
  return out + html::table({"tenant", "#days", "a month?", "first run", "last run"}, rows) + "</section>";
}

std::string verdicts_section(const Review& review) {
  std::string out = html::section_start(review, "verdicts");
  out += "<p>Rules:</p><ul>";
  for (const std::string& rule : review.decision.rules) out += "<li>" + e(rule) + "</li>";
  out += "</ul>";
  if (review.no_runs) return out + "<p class=\"empty\">No runs in this period: nothing to decide.</p></section>";
  std::vector<std::vector<std::string>> rows;
  for (const TenantVerdict& tenant : review.decision.tenants) {
    std::string reasons = "<ul>";
    for (const std::string& reason : tenant.reasons) reasons += "<li>" + e(reason) + "</li>";
    rows.push_back({e(tenant.tenant.empty() ? "(none)" : tenant.tenant),
                    "<span class=\"verdict " + css_of(tenant.verdict) + "\" data-verdict=\"" + e(tenant.verdict) +
                        "\">" + e(tenant.verdict) + "</span>",
                    std::to_string(tenant.runs), std::to_string(tenant.drills_passed), std::to_string(tenant.drills_failed),
                    std::to_string(tenant.objectives_missed), std::to_string(tenant.leftovers), reasons + "</ul>"});
  }
  return out + html::table({"tenant", "line", "#runs", "#drills passed", "#drills failed", "#objectives missed",
                            "#leftovers", "reasons"}, rows, "verdicts") + "</section>";
}

std::string owners_section(const Review& review) {
  std::string out = html::section_start(review, "owners");
  auto rows_of = [](const std::vector<OwnerRow>& owners, const char* none) {
    std::vector<std::vector<std::string>> rows;
    for (const OwnerRow& owner : owners) {
      rows.push_back({e(owner.owner.empty() ? none : owner.owner), std::to_string(owner.runs), html::hours(owner.gpu_hours),
                      html::hours(owner.slot_hours)});
    }
    return rows;
  };
  const Operations& operations = review.operations;
  if (operations.tenants.empty() && operations.users.empty()) return out + html::no_runs_note() + "</section>";
  out += "<h3>Tenants</h3>" + html::table({"tenant", "#runs", "#GPU-hours", "#slot-hours"}, rows_of(operations.tenants, "(none)"));
  out += "<h3>Users</h3>" + html::table({"user", "#runs", "#GPU-hours", "#slot-hours"}, rows_of(operations.users, "(unknown)"));
  return out + "</section>";
}

std::string capacity_section(const Review& review) {
  const Operations& operations = review.operations;
  std::string out = html::section_start(review, "capacity");
  out += "<p class=\"trend\">Trend: " + e(operations.trend) + "</p>";
  std::vector<std::pair<std::string, double>> weeks;
  for (const TrendPoint& point : operations.capacity_trend) weeks.emplace_back(point.week, point.busy_fraction);
  out += busy_chart(weeks, "busy % of the hosts used, per 7 days from the period's start");
  if (operations.standing_out.empty()) {
    return out + "<p>Hosts whose failure rate stands out: none.</p></section>";
  }
  std::vector<std::vector<std::string>> rows;
  for (const registry::StandingOutHost& host : operations.standing_out) {
    rows.push_back({e(host.host), e(host.resource), html::hours(host.unit_hours), std::to_string(host.root_cause_failures),
                    fixed(host.per_1000_hours, 2), fixed(host.median_per_1000_hours, 2)});
  }
  return out + "<p>Hosts whose failure rate stands out (add capacity elsewhere, or repair them):</p>" +
         html::table({"host", "unit", "#unit-hours", "#root causes", "#per 1,000 h", "#median"}, rows) + "</section>";
}

std::string quarantine_section(const Review& review) {
  std::string out = html::section_start(review, "quarantine");
  if (review.operations.quarantined.empty()) return out + "<p class=\"empty\">No host quarantined in the period.</p></section>";
  std::vector<std::vector<std::string>> rows;
  for (const QuarantinedHost& host : review.operations.quarantined) {
    rows.push_back({e(host.host), host.active ? "<span class=\"warn\">active</span>" : "over", e(host.reason),
                    e(host.since), e(host.until), e(host.source), e(host.released.empty() ? "-" : host.released)});
  }
  return out + html::table({"host", "now", "reason", "since", "until", "by", "released"}, rows) + "</section>";
}

std::string audit_section(const Review& review) {
  const Operations& operations = review.operations;
  std::string out = html::section_start(review, "audit");
  out += "<p>" + std::to_string(operations.audit.size()) + " permission-relevant of " +
         std::to_string(operations.audit_rows_in_period) + " audit rows in the period.</p>";
  if (operations.audit.empty()) return out + "</section>";
  std::vector<std::vector<std::string>> rows;
  for (const AuditEntry& entry : operations.audit) {
    rows.push_back({e(entry.at), e(entry.category), e(entry.actor), e(entry.action), e(entry.run_id), e(entry.target),
                    e(entry.result)});
  }
  return out + html::table({"when", "what", "who", "action", "run", "target", "result"}, rows) + "</section>";
}

std::string problems_section(const Review& review) {
  if (review.problems.empty() && review.skipped_lines == 0) return "";
  std::string out = "<section id=\"problems\"><h3>What could not be read</h3><p>" + std::to_string(review.skipped_lines) +
                    " damaged lines left out.</p><ul>";
  for (const std::string& problem : review.problems) out += "<li>" + e(problem) + "</li>";
  return out + "</ul></section>";
}

}  // namespace

namespace html {

std::string table(const std::vector<std::string>& headers, const std::vector<std::vector<std::string>>& rows,
                  const std::string& css_class) {
  std::string out = "<table" + (css_class.empty() ? std::string() : " class=\"" + css_class + "\"") + "><tr>";
  std::vector<bool> numeric;
  for (const std::string& header : headers) {
    numeric.push_back(!header.empty() && header[0] == '#');
    out += "<th>" + e(numeric.back() ? header.substr(1) : header) + "</th>";
  }
  out += "</tr>";
  for (const std::vector<std::string>& row : rows) {
    out += "<tr>";
    for (size_t i = 0; i < row.size(); ++i) out += (i < numeric.size() && numeric[i] ? "<td class=\"n\">" : "<td>") + row[i] + "</td>";
    out += "</tr>";
  }
  return out + "</table>";
}

std::string percent(double fraction) { return fixed(100.0 * fraction, 1) + " %"; }
std::string hours(double value) { return fixed(value, 1); }

std::string section_start(const Review& review, const std::string& id) {
  std::string title = id;
  for (const SectionName& section : kSections) {
    if (section.id == id) title = section.title;
  }
  auto source = review.sources.find(id);
  std::string scope = review.scope.since + " to " + review.scope.until +
                      (review.scope.tenant.empty() ? ", every tenant" : ", tenant " + review.scope.tenant) +
                      (review.scope.hosts.empty() ? ", every host" : ", hosts " + join(review.scope.hosts, ","));
  return "<section id=\"" + e(id) + "\"><h3>" + e(title) + "</h3><p class=\"source\">Source: " +
         e(source == review.sources.end() ? "-" : source->second) + " · generated " + e(review.generated) + " · scope " +
         e(scope) + "</p>";
}

std::string no_runs_note() { return "<p class=\"empty no-runs\">No runs in this period.</p>"; }

}  // namespace html

std::string render_review_html(const Review& review) {
  std::string out = "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
                    "<meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">"
                    "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; img-src data:\">"
                    "<title>dtrain review " + e(review.scope.since.substr(0, 10)) + " to " + e(review.scope.until.substr(0, 10)) +
                    "</title><style>" + kStyle + "</style></head><body><main>";
  out += "<h1>dtrain review</h1><p class=\"sub summary\">" + e(review.summary) + "</p><p class=\"sub\">generated " +
         e(review.generated) + " by dtrain " + e(review.dtrain_version) + " · registry " + e(review.registry) +
         " · drills " + e(review.drill_history) + "</p>";
  out += "<nav><a href=\"#current-state\">Current state</a><a href=\"#validation\">Validation</a>"
         "<a href=\"#decision\">Decision</a><a href=\"#operations\">Operations</a></nav>";
  out += "<h2 id=\"current-state\">Current state</h2>" + hosts_section(review) + runs_section(review) + causes_section(review);
  out += "<h2 id=\"validation\">Validation</h2>" + html::validation_sections(review);
  out += "<h2 id=\"decision\">Decision</h2>" + objectives_section(review) + pilot_section(review) + verdicts_section(review);
  out += "<h2 id=\"operations\">Operations</h2>" + owners_section(review) + capacity_section(review) +
         quarantine_section(review) + audit_section(review);
  out += problems_section(review);
  return out + "</main></body></html>\n";
}

}  // namespace dtrain::review
