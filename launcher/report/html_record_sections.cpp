// report.html's sections from the run's records: checkpoints, recovery phases, goodput, and
// resources (released processes, host resources).

#include "launcher/report/html_parts.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>

#include "launcher/base/clock.h"
#include "launcher/base/json_fields.h"
#include "launcher/base/strings.h"
#include "launcher/metrics/goodput.h"
#include "launcher/report/downsample.h"

namespace dtrain::report::page {

using nlohmann::json;

/// One checkpoint table row: a commit (verified) or a rejection (and why).
std::string checkpoint_row(const LoggedEvent& event, int64_t start_ms) {
  const auto* committed = std::get_if<events::CheckpointCommitted>(&event.event);
  const auto* rejected = std::get_if<events::CheckpointRejected>(&event.event);
  std::optional<int64_t> at = event.wall_ms();
  int64_t step = committed ? committed->step : rejected->step;
  int gen = committed ? committed->gen : rejected->gen;
  int rank = committed ? committed->rank : rejected->rank;
  const std::string& host = committed ? committed->host : rejected->host;
  return std::string("<tr class=\"checkpoint\" data-verified=\"") + (committed ? "yes" : "no") + "\"><td>" +
         e(at ? since(*at, start_ms) : "?") + "</td><td class=\"n\">" + std::to_string(step) + "</td><td class=\"n\">" +
         std::to_string(gen) + "</td><td class=\"n\">" +
         (committed ? e(human_bytes(static_cast<double>(committed->bytes))) : "-") + "</td><td class=\"n\">" +
         (committed ? fixed(committed->seconds, 3) + " s" : "-") + "</td><td>" +
         (committed ? std::string("yes: every shard and the manifest") : "no: " + e(rejected->reason)) + "</td><td>" +
         e("rank " + std::to_string(rank) + " on " + host) + "</td></tr>";
}

std::string checkpoints_section(const RunRecord& record, const Timeline& timeline, const ReportLimits& limits) {
  std::vector<const LoggedEvent*> committed = events_of<events::CheckpointCommitted>(record);
  std::vector<const LoggedEvent*> rejected = events_of<events::CheckpointRejected>(record);
  std::string out = "<section id=\"checkpoints\"><h2>Checkpoints</h2>";
  if (committed.empty() && rejected.empty()) return out + "<p>No checkpoint events.</p></section>";
  int64_t total_bytes = 0;
  double total_seconds = 0;
  for (const LoggedEvent* event : committed) {
    total_bytes += std::get<events::CheckpointCommitted>(event->event).bytes;
    total_seconds += std::get<events::CheckpointCommitted>(event->event).seconds;
  }
  out += "<p>" + std::to_string(committed.size()) + " committed (" + e(human_bytes(static_cast<double>(total_bytes))) +
         " written, " + fixed(total_seconds, 2) + " s saving), " + std::to_string(rejected.size()) + " rejected.</p>";
  // Newest first: the ones a resume would use.
  std::vector<const LoggedEvent*> rows = committed;
  rows.insert(rows.end(), rejected.begin(), rejected.end());
  std::stable_sort(rows.begin(), rows.end(), [](const LoggedEvent* a, const LoggedEvent* b) { return a->ts > b->ts; });
  out += "<table><tr><th>when</th><th>step</th><th>gen</th><th>size</th><th>save time</th><th>verified</th><th>by</th></tr>";
  for (size_t i = 0; i < rows.size() && i < limits.checkpoint_rows; ++i) {
    out += checkpoint_row(*rows[i], timeline.start_ms);
  }
  out += "</table>";
  if (rows.size() > limits.checkpoint_rows) out += "<p class=\"note\">" + std::to_string(rows.size() - limits.checkpoint_rows) + " older ones in events.jsonl.</p>";
  return out + "</section>";
}

const char* phase_color(const std::string& phase) {
  static const std::map<std::string, const char*> colors = {
      {"detect", "#ef6c00"}, {"stop", "#78909c"}, {"replan", "#1565c0"}, {"spawn", "#2e7d32"},
      {"rendezvous", "#00838f"}, {"first_step", "#7cb342"}, {"kill", "#d84315"}, {"abort", "#5d4037"},
      {"state_and_first_step", "#9ccc65"}};
  auto found = colors.find(phase);
  return found == colors.end() ? "#8d6e63" : found->second;
}

std::string recovery_section(const Timeline& timeline, const ReportLimits& limits) {
  std::string out = "<section id=\"recovery\"><h2>Recovery phases</h2>";
  if (timeline.recoveries.empty()) return out + "<p>No recovery.</p></section>";
  int64_t longest = 1;
  for (const RecoverySpan& span : timeline.recoveries) {
    int64_t total = 0;
    for (const auto& [phase, ms] : span.phases) total += ms;
    longest = std::max(longest, total);
  }
  size_t count = std::min(timeline.recoveries.size(), limits.table_rows);
  constexpr double kRow = 26, kBarX = 360, kBarWidth = 640;
  double height = kRow * static_cast<double>(count) + 8;
  out += "<svg id=\"recovery-svg\" width=\"" + px(kPageWidth) + "\" height=\"" + px(height) + "\" viewBox=\"0 0 " +
         px(kPageWidth) + " " + px(height) + "\" role=\"img\" aria-label=\"recovery phases\">";
  std::set<std::string> phases_seen;
  for (size_t i = 0; i < count; ++i) {
    const RecoverySpan& span = timeline.recoveries[i];
    double y = 4 + kRow * static_cast<double>(i);
    std::string label = "gen " + std::to_string(span.generation) + "→" + std::to_string(span.generation + 1) + " " +
                        span.action + ": " + span.cause;
    if (label.size() > 58) label = label.substr(0, 57) + "…";
    out += "<g class=\"recovery\" data-gen=\"" + std::to_string(span.generation) + "\"><text x=\"4\" y=\"" + px(y + 15) + "\">" + e(label) + "</text>";
    double x = kBarX;
    int64_t total = 0;
    for (const auto& [phase, ms] : span.phases) {
      double w = static_cast<double>(ms) / static_cast<double>(longest) * kBarWidth;
      phases_seen.insert(phase);
      out += "<rect class=\"phase\" data-phase=\"" + e(phase) + "\" x=\"" + px(x) + "\" y=\"" + px(y + 3) + "\" width=\"" +
             px(std::max(0.5, w)) + "\" height=\"16\" fill=\"" + phase_color(phase) + "\"><title>" + e(phase) + " " +
             std::to_string(ms) + " ms</title></rect>";
      x += w;
      total += ms;
    }
    out += "<text x=\"" + px(x + 6) + "\" y=\"" + px(y + 15) + "\">" + e(human_ms(total)) + ", " + std::to_string(span.steps_lost) +
           " steps lost</text></g>";
  }
  out += "</svg><div class=\"legend\">";
  for (const std::string& phase : {std::string("detect"), std::string("stop"), std::string("replan"), std::string("spawn"),
                                   std::string("rendezvous"), std::string("first_step")}) {
    out += legend_item(phase_color(phase), phase);
  }
  for (const std::string& phase : {std::string("kill"), std::string("abort"), std::string("state_and_first_step")}) {
    if (phases_seen.count(phase)) out += legend_item(phase_color(phase), phase);  // in-place recoveries only
  }
  out += "</div>";
  if (timeline.recoveries.size() > count) out += "<p class=\"note\">" + std::to_string(timeline.recoveries.size() - count) + " more recoveries in timeline.json.</p>";
  return out + "</section>";
}

std::string goodput_section(const RunRecord& record, const Timeline& timeline) {
  std::string out = "<section id=\"goodput\"><h2>Goodput</h2>";
  metrics::Goodput goodput = metrics::goodput_from_events(record.events);
  if (goodput.wall_seconds <= 0) return out + "<p>No wall time in the events yet.</p></section>";
  out += "<p><b id=\"goodput-ratio\">" + fixed(100.0 * goodput.ratio(), 1) + " %</b> of " +
         e(human_ms(static_cast<int64_t>(goodput.wall_seconds * 1000))) + " wall time trained the model" +
         (goodput.finished ? "" : " (the run has not finished: up to its last event)") + ".</p>";
  // One stacked bar: productive first, then where the rest went; the parts sum to the wall time.
  const std::vector<std::pair<std::string, double>> parts = {
      {"productive", goodput.productive_seconds},     {"launch", goodput.launch_seconds},
      {"detection", goodput.detection_seconds},       {"restart", goodput.restart_seconds},
      {"redone steps", goodput.redone_steps_seconds}, {"checkpoint stall", goodput.checkpoint_stall_seconds},
      {"shutdown", goodput.shutdown_seconds}};
  static const char* colors[] = {"#43a047", "#90a4ae", "#f57c00", "#e53935", "#8e24aa", "#6d4c41", "#546e7a"};
  constexpr double kBarWidth = 900;
  out += "<svg id=\"goodput-svg\" width=\"" + px(kPageWidth) + "\" height=\"30\" viewBox=\"0 0 " + px(kPageWidth) +
         " 30\" role=\"img\" aria-label=\"goodput\">";
  double x = 0;
  for (size_t i = 0; i < parts.size(); ++i) {
    double w = parts[i].second / goodput.wall_seconds * kBarWidth;
    if (w <= 0) continue;
    out += "<rect class=\"goodput-part\" data-part=\"" + e(parts[i].first) + "\" x=\"" + px(x) + "\" y=\"4\" width=\"" +
           px(std::max(0.5, w)) + "\" height=\"20\" fill=\"" + colors[i] + "\"><title>" + e(parts[i].first) + " " +
           fixed(parts[i].second, 2) + " s</title></rect>";
    x += w;
  }
  out += "</svg><div class=\"legend\">";
  for (size_t i = 0; i < parts.size(); ++i) out += legend_item(colors[i], parts[i].first + " " + fixed(parts[i].second, 2) + " s");
  out += "</div><p class=\"note\">" + std::to_string(goodput.restarts) + " restarts, " + std::to_string(goodput.redone_steps) +
         " steps redone, " + std::to_string(timeline.recoveries.size()) +
         " recoveries drawn above. Computed from events.jsonl alone (launcher/metrics goodput).</p>";
  return out + "</section>";
}

/// One host's figures as columns: its own ("cpu_percent", "memory_used_mb") as they are, and a
/// list's ("gpus.0.utilization_percent", "workers.3.rss_mb") folded over its entries: percentages
/// and temperatures by their maximum, other amounts by their sum, with the entries counted
/// ("gpus", "workers"); ids (index, pid, rank, gen) are not figures.
std::map<std::string, double> host_figures(const HostResources& resources) {
  std::map<std::string, double> figures;
  std::map<std::string, std::set<std::string>> entries;  // list → its entry numbers
  for (const auto& [key, value] : resources.values) {
    size_t first_dot = key.find('.');
    if (first_dot == std::string::npos) {
      figures[key] = value;
      continue;
    }
    size_t second_dot = key.find('.', first_dot + 1);
    std::string list = key.substr(0, first_dot);
    std::string field = second_dot == std::string::npos ? "" : key.substr(second_dot + 1);
    entries[list].insert(key.substr(first_dot + 1, second_dot - first_dot - 1));
    if (field.empty() || field == "index" || field == "pid" || field == "rank" || field == "gen" || field.find('.') != std::string::npos) {
      continue;
    }
    bool peak = field.find("percent") != std::string::npos || field.find("temperature") != std::string::npos;
    std::string name = list + " " + field + (peak ? " (max)" : " (sum)");
    auto [slot, added] = figures.try_emplace(name, value);
    if (!added) slot->second = peak ? std::max(slot->second, value) : slot->second + value;
  }
  for (const auto& [list, numbers] : entries) figures[list] = static_cast<double>(numbers.size());
  return figures;
}

std::string resources_section(const RunRecord& record, const Timeline& timeline, const ReportLimits& limits) {
  std::string out = "<section id=\"resources\"><h2>Resources released</h2>";
  std::vector<const LoggedEvent*> released = events_of<events::ResourcesReleased>(record);
  std::vector<const LoggedEvent*> unconfirmed = events_of<events::ResourcesUnconfirmed>(record);
  if (released.empty() && unconfirmed.empty()) out += "<p>No release events.</p>";
  // Per generation: how many hosts confirmed, processes killed, any left, slowest host.
  struct Summary {
    int hosts = 0;
    int64_t killed = 0, remaining = 0, slowest_ms = 0;
    std::string slowest_host;
  };
  std::map<int, Summary> by_generation;
  for (const LoggedEvent* event : released) {
    const auto& release = std::get<events::ResourcesReleased>(event->event);
    Summary& summary = by_generation[release.gen];
    ++summary.hosts;
    summary.killed += static_cast<int64_t>(release.killed.size());
    summary.remaining += release.remaining;
    if (release.ms >= summary.slowest_ms) {
      summary.slowest_ms = release.ms;
      summary.slowest_host = release.host;
    }
  }
  if (!by_generation.empty()) {
    out += "<table id=\"released\"><tr><th>gen</th><th>hosts confirmed</th><th>processes killed</th><th>left running</th><th>slowest</th></tr>";
    for (const auto& [generation, summary] : by_generation) {
      out += "<tr class=\"released\" data-gen=\"" + std::to_string(generation) + "\"><td class=\"n\">" + std::to_string(generation) +
             "</td><td class=\"n\">" + std::to_string(summary.hosts) + "</td><td class=\"n\">" + std::to_string(summary.killed) +
             "</td><td class=\"n" + (summary.remaining ? " warn" : "") + "\">" + std::to_string(summary.remaining) + "</td><td>" +
             e(summary.slowest_host + " " + human_ms(summary.slowest_ms)) + "</td></tr>";
    }
    out += "</table>";
  }
  for (const LoggedEvent* event : unconfirmed) {
    const auto& missing = std::get<events::ResourcesUnconfirmed>(event->event);
    out += "<p class=\"warn\">Not confirmed: " + e(json_compact(json(missing.hosts))) + " — " + e(missing.detail) + "</p>";
  }

  // Host resources, when the agents report them (metrics.jsonl): the newest figures per host,
  // or past 64 hosts the newest spread over them.
  std::map<std::string, const HostResources*> newest;
  const HostResources* newest_summary = nullptr;
  for (const HostResources& resources : record.resources) {
    if (resources.summary) newest_summary = &resources;
    else newest[resources.host] = &resources;
  }
  if (!newest.empty()) {
    std::vector<std::map<std::string, double>> rows;
    std::vector<std::string> columns;
    for (const auto& [host, resources] : newest) {
      rows.push_back(host_figures(*resources));
      for (const auto& [name, value] : rows.back()) {
        if (std::find(columns.begin(), columns.end(), name) == columns.end() && columns.size() < 14) columns.push_back(name);
      }
    }
    out += "<h3 id=\"host-resources\">Host resources (the newest of " + std::to_string(record.resources.size()) +
           " samples)</h3><table><tr><th>host</th>";
    for (const std::string& column : columns) out += "<th>" + e(column) + "</th>";
    out += "</tr>";
    size_t row = 0;
    for (const auto& [host, resources] : newest) {
      if (row >= limits.table_rows / 2) break;
      out += "<tr><td>" + e(host) + "</td>";
      for (const std::string& column : columns) {
        auto found = rows[row].find(column);
        out += "<td class=\"n\">" + (found == rows[row].end() ? std::string("-") : e(number(found->second))) + "</td>";
      }
      out += "</tr>";
      ++row;
    }
    out += "</table>";
    if (newest.size() > limits.table_rows / 2) out += "<p class=\"note\">" + std::to_string(newest.size() - limits.table_rows / 2) + " more hosts in metrics.jsonl.</p>";
  }
  if (newest_summary) {
    out += "<h3 id=\"host-resources\">Host resources over " + std::to_string(newest_summary->hosts_reporting) +
           " hosts (the newest sample)</h3><table><tr><th>figure</th><th>min</th><th>median</th><th>max</th></tr>";
    std::set<std::string> figures;
    for (const auto& [key, value] : newest_summary->values) figures.insert(key.substr(0, key.rfind('.')));
    for (const std::string& figure : figures) {
      out += "<tr><td>" + e(figure) + "</td>";
      for (const char* part : {".min", ".median", ".max"}) {
        auto found = newest_summary->values.find(figure + part);
        out += "<td class=\"n\">" + (found == newest_summary->values.end() ? std::string("-") : e(number(found->second))) + "</td>";
      }
      out += "</tr>";
    }
    out += "</table>";
  }
  (void)timeline;
  return out + "</section>";
}

std::string problems_section(const RunRecord& record) {
  if (record.problems.empty()) return "";
  std::string out = "<section id=\"problems\"><h2>What could not be read</h2><ul>";
  for (const std::string& problem : record.problems) out += "<li>" + e(problem) + "</li>";
  return out + "</ul></section>";
}

}  // namespace dtrain::report::page
