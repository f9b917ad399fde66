#include "launcher/report/html_report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <map>
#include <set>

#include "launcher/base/clock.h"
#include "launcher/base/duration.h"
#include "launcher/events/event_catalogue.h"
#include "launcher/base/strings.h"
#include "launcher/base/version.h"
#include "launcher/report/downsample.h"
#include "launcher/metrics/goodput.h"
#include "launcher/runlog/event_log.h"
#include "launcher/base/json_fields.h"

namespace dtrain::report {
namespace {

using nlohmann::json;

// ---- formatting ---------------------------------------------------------------------------------

std::string fixed(double value, int decimals) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%.*f", decimals, value);
  return buffer;
}

/// Coordinates in SVG: one decimal is plenty and keeps big pages small.
std::string px(double value) {
  if (!std::isfinite(value)) value = 0;
  return fixed(std::round(value * 10) / 10, std::fabs(value - std::round(value)) < 0.05 ? 0 : 1);
}

std::string number(double value) {
  char buffer[64];
  // Whole numbers past 10,000 (memory in MB, bytes) in full: "24105", not "2.41e+04".
  std::snprintf(buffer, sizeof buffer, std::fabs(value) >= 1e4 && std::fabs(value) < 1e15 ? "%.0f" : "%.4g", value);
  return buffer;
}

std::string human_bytes(double bytes) {
  static const char* units[] = {"B", "kB", "MB", "GB", "TB"};
  int unit = 0;
  while (std::fabs(bytes) >= 1000 && unit < 4) {
    bytes /= 1000;
    ++unit;
  }
  return (unit == 0 ? fixed(bytes, 0) : fixed(bytes, 1)) + " " + units[unit];
}

std::string human_ms(int64_t ms) { return format_duration(Millis(ms), DurationStyle::report); }

/// "+1m05s" from the run's start: times on the page are relative, the start is absolute.
std::string since(int64_t wall_ms, int64_t start_ms) { return "+" + human_ms(wall_ms - start_ms); }

/// "0-7, 12, 14-15": ranks as ranges.
std::string ranges(std::vector<int> values) {
  std::sort(values.begin(), values.end());
  std::vector<std::string> parts;
  for (size_t i = 0; i < values.size();) {
    size_t j = i;
    while (j + 1 < values.size() && values[j + 1] == values[j] + 1) ++j;
    parts.push_back(j == i ? std::to_string(values[i]) : std::to_string(values[i]) + "-" + std::to_string(values[j]));
    i = j + 1;
  }
  return join(parts, ", ");
}

std::string e(std::string_view text) { return html_escape(text); }

int int_field(const json& event, std::string_view key, int fallback = -1) {
  std::optional<int64_t> value = json_int(event, key);
  return value && *value >= INT32_MIN && *value <= INT32_MAX ? static_cast<int>(*value) : fallback;
}

// ---- page frame ---------------------------------------------------------------------------------

constexpr const char* kStyle = R"(
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0;color:#1d232b;background:#f6f7f9}
main{max-width:1200px;margin:0 auto;padding:16px 20px 40px}
h1{font-size:22px;margin:8px 0 2px}h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #d5d9df;padding-bottom:4px}
h3{font-size:14px;margin:14px 0 4px}
.sub{color:#5b6573;margin:0 0 10px}
section{background:#fff;border:1px solid #e1e4e8;border-radius:6px;padding:4px 16px 14px;margin:14px 0}
table{border-collapse:collapse;font-size:13px;margin:6px 0}th,td{padding:3px 10px 3px 0;text-align:left;vertical-align:top}
th{color:#5b6573;font-weight:600;border-bottom:1px solid #d5d9df}td:not(:last-child){white-space:nowrap}td.n{text-align:right;font-variant-numeric:tabular-nums}
.outcome{font-size:18px;font-weight:600;padding:8px 12px;border-radius:5px;display:inline-block;margin:8px 0}
.succeeded{background:#dcf5e3;color:#11652b}.failed{background:#fde0de;color:#8c1d18}.other{background:#fff2cc;color:#6b4e00}
.cause{border-left:4px solid #c62828;padding:4px 10px;background:#fff6f5;margin:8px 0}
pre{background:#f2f4f7;padding:8px;overflow:auto;font-size:12px;max-height:260px}
svg{display:block;margin:6px 0}svg text{font:11px system-ui,sans-serif;fill:#3b4450}
.legend span{display:inline-block;margin:0 14px 4px 0;font-size:12px}.legend i{display:inline-block;width:11px;height:11px;margin-right:4px;vertical-align:-1px;border-radius:2px}
.note{color:#5b6573;font-size:12px}.warn{color:#8c1d18}
)";

// Mark colours and shapes, one per kind: the legend and the drawing use the same table.
struct MarkStyle {
  MarkKind kind;
  const char* color;
  const char* legend;
};
constexpr MarkStyle kMarkStyles[] = {
    {MarkKind::crash, "#d32f2f", "crash"},
    {MarkKind::hang, "#7b1fa2", "hang (where the silence began)"},
    {MarkKind::host_lost, "#212121", "host lost (where the silence began)"},
    {MarkKind::failure, "#e64a19", "other failure"},
    {MarkKind::detected, "#f57c00", "detected"},
    {MarkKind::stop, "#78909c", "stopped (workers gone)"},
    {MarkKind::replan, "#1565c0", "re-plan"},
    {MarkKind::spawn, "#2e7d32", "spawn"},
    {MarkKind::rendezvous, "#00838f", "rendezvous"},
    {MarkKind::first_step, "#43a047", "first step"},
    {MarkKind::checkpoint, "#9e9e9e", "checkpoint"},
    {MarkKind::drill, "#c2185b", "drill"},
    {MarkKind::finished, "#37474f", "run ended"},
};

const char* mark_color(MarkKind kind) {
  for (const MarkStyle& style : kMarkStyles) {
    if (style.kind == kind) return style.color;
  }
  return "#000";
}

bool is_failure(MarkKind kind) {
  return kind == MarkKind::crash || kind == MarkKind::hang || kind == MarkKind::host_lost || kind == MarkKind::failure;
}

/// The shape of a mark centred at (x, y).
std::string mark_shape(MarkKind kind, double x, double y) {
  std::string color = mark_color(kind);
  std::string X = px(x), Y = px(y);
  switch (kind) {
    case MarkKind::crash:
      return "<path d=\"M" + px(x - 5) + " " + px(y - 5) + "l10 10m0 -10l-10 10\" stroke=\"" + color +
             "\" stroke-width=\"2.5\"/>";
    case MarkKind::hang:
    case MarkKind::replan:
      return "<path d=\"M" + X + " " + px(y - 6) + "l6 6l-6 6l-6 -6z\" fill=\"" +
             (kind == MarkKind::hang ? color : std::string("#fff")) + "\" stroke=\"" + color + "\" stroke-width=\"1.5\"/>";
    case MarkKind::host_lost: return "<rect x=\"" + px(x - 5) + "\" y=\"" + px(y - 5) + "\" width=\"10\" height=\"10\" fill=\"" + color + "\"/>";
    case MarkKind::detected:
      return "<path d=\"M" + px(x - 5) + " " + px(y - 6) + "h10l-5 8z\" fill=\"" + color + "\"/>";
    case MarkKind::stop:
    case MarkKind::finished:
      return "<path d=\"M" + X + " " + px(y - 7) + "v14\" stroke=\"" + color + "\" stroke-width=\"3\"/>";
    case MarkKind::spawn:
      return "<path d=\"M" + px(x - 3) + " " + px(y - 5) + "l8 5l-8 5z\" fill=\"" + color + "\"/>";
    case MarkKind::checkpoint:
      return "<path d=\"M" + X + " " + px(y - 4) + "v8\" stroke=\"" + color + "\" stroke-width=\"1\"/>";
    case MarkKind::drill:
      return "<path d=\"M" + px(x + 1) + " " + px(y - 7) + "l-5 8h4l-1 6l5 -8h-4z\" fill=\"" + color + "\"/>";
    default:
      return "<circle cx=\"" + X + "\" cy=\"" + Y + "\" r=\"4.5\" fill=\"" + color + "\"/>";
  }
}

std::string legend_item(const std::string& color, const std::string& text) {
  return "<span><i style=\"background:" + color + "\"></i>" + e(text) + "</span>";
}

/// A horizontal time axis over [start, end] at y, from x0 over `width` pixels.
std::string time_axis(int64_t start, int64_t end, double x0, double width, double y) {
  double span = std::max<int64_t>(1, end - start);
  double step = 1;
  for (double candidate : {100., 200., 500., 1e3, 2e3, 5e3, 1e4, 15e3, 3e4, 6e4, 12e4, 3e5, 6e5, 9e5, 18e5, 36e5,
                           72e5, 144e5, 216e5, 432e5, 864e5}) {
    step = candidate;
    if (span / candidate <= 10) break;
  }
  std::string out = "<path d=\"M" + px(x0) + " " + px(y) + "h" + px(width) + "\" stroke=\"#9aa3ad\"/>";
  for (double t = 0; t <= span + 1e-9; t += step) {
    double x = x0 + t / span * width;
    out += "<path d=\"M" + px(x) + " " + px(y) + "v4\" stroke=\"#9aa3ad\"/><text x=\"" + px(x) + "\" y=\"" +
           px(y + 15) + "\" text-anchor=\"middle\">+" + e(human_ms(static_cast<int64_t>(t))) + "</text>";
  }
  return out;
}

// ---- sections -----------------------------------------------------------------------------------

const json* last_event(const RunRecord& record, std::string_view name) {
  for (auto it = record.events.rbegin(); it != record.events.rend(); ++it) {
    if (json_string(*it, "ev") == name) return &*it;
  }
  return nullptr;
}

std::vector<const json*> events_named(const RunRecord& record, std::string_view name) {
  std::vector<const json*> out;
  for (const json& event : record.events) {
    if (json_string(event, "ev") == name) out.push_back(&event);
  }
  return out;
}

/// "rank 1 on localhost (worker.exit): killed by SIGKILL"
std::string cause_line(const json& cause) {
  std::string text;
  if (int_field(cause, "rank") >= 0) text += "rank " + std::to_string(int_field(cause, "rank")) + " on ";
  text += json_string(cause, "host", "?");
  if (std::string kind = json_string(cause, "kind"); !kind.empty()) text += " (" + kind + ")";
  std::string detail = json_string(cause, "detail", json_string(cause, "message"));
  return detail.empty() ? text : text + ": " + detail;
}

std::string outcome_section(const RunRecord& record, const Timeline& timeline) {
  const json* finished = last_event(record, events::kRunFinished);
  std::string state = finished ? json_string(*finished, "state", "unknown")
                               : (record.state ? json_string(*record.state, "state", "unknown") : "unknown");
  std::string css = state == "succeeded" ? "succeeded" : state == "failed" ? "failed" : "other";
  std::string out = "<section id=\"outcome\"><h2>Outcome and root cause</h2>";
  out += "<div class=\"outcome " + css + "\" data-state=\"" + e(state) + "\">" + e(state);
  if (finished) out += " · exit " + std::to_string(int_field(*finished, "exit_code", 0));
  out += "</div>";
  if (!finished) {
    out += "<p class=\"warn\">No run.finished event: the run was still going when this report was made, or its "
           "supervisor ended without a final state (state.json says <b>" +
           e(record.state ? json_string(*record.state, "state", "unknown") : "nothing") + "</b>).</p>";
  }
  out += "<table>";
  auto row = [&](const std::string& label, const std::string& value) {
    out += "<tr><th>" + e(label) + "</th><td>" + value + "</td></tr>";
  };
  row("started", e(format_timestamp_utc(timeline.start_ms)));
  row("duration", e(human_ms(finished ? json_int(*finished, "duration_ms").value_or(timeline.end_ms - timeline.start_ms)
                                      : timeline.end_ms - timeline.start_ms)));
  row("generations", std::to_string(timeline.generations.size()));
  row("restarts", finished ? std::to_string(int_field(*finished, "restarts", 0)) : std::to_string(timeline.recoveries.size()));
  if (const json* submitted = last_event(record, events::kRunSubmitted)) {
    row("world size at submit", std::to_string(int_field(*submitted, "world_size", 0)));
    row("spec", e(json_string(*submitted, "spec")));
  }
  out += "</table>";

  // The root cause: what run.finished names, else the supervisor's failure.root_cause, else the
  // first failure detected.
  const json* cause = finished ? json_member(*finished, "root_cause") : nullptr;
  if (!cause || !cause->is_object()) cause = last_event(record, events::kFailureRootCause);
  std::vector<const json*> detected = events_named(record, events::kFailureDetected);
  if ((!cause || !cause->is_object()) && !detected.empty()) cause = detected.front();
  if (cause && cause->is_object()) {
    out += "<div class=\"cause\" id=\"root-cause\"><b>" +
           std::string(state == "failed" ? "Root cause" : "Failure (recovered)") + ":</b> " +
           e(cause_line(*cause)) + "</div>";
  } else {
    out += "<p>No failure was detected.</p>";
  }
  if (!detected.empty()) {
    out += "<h3>Every failure detected (" + std::to_string(detected.size()) + ")</h3><table><tr><th>when</th><th>gen</th><th>kind</th><th>where</th><th>detail</th></tr>";
    size_t shown = 0;
    for (const json* event : detected) {
      if (++shown > 50) break;
      std::optional<int64_t> at = event_wall_ms(*event);
      std::string where = json_member(*event, "rank") ? "rank " + std::to_string(int_field(*event, "rank")) + " on " : "";
      out += "<tr class=\"failure-row\" data-kind=\"" + e(json_string(*event, "kind")) + "\"><td>" +
             e(at ? since(*at, timeline.start_ms) : "?") + "</td><td class=\"n\">" +
             std::to_string(int_field(*event, "gen", 0)) + "</td><td>" + e(json_string(*event, "kind")) + "</td><td>" +
             e(where + json_string(*event, "host")) + "</td><td>" + e(json_string(*event, "detail")) + "</td></tr>";
    }
    out += "</table>";
    if (detected.size() > 50) out += "<p class=\"note\">" + std::to_string(detected.size() - 50) + " more in events.jsonl.</p>";
  }
  return out + "</section>";
}

std::string plan_section(const RunRecord& record) {
  std::string out = "<section id=\"plan\"><h2>Plan and GPU topology</h2>";
  if (record.plans.empty()) out += "<p>No plan-&lt;gen&gt;.json in the run directory.</p>";
  // Each host's GPUs as "8 × NVIDIA H100", for the plan tables (hosts/*.json).
  std::map<std::string, std::string> gpus_of;
  for (const HostFacts& host : record.hosts) {
    std::map<std::string, int> models;
    for (const HostFacts::Gpu& gpu : host.gpus) ++models[gpu.name.empty() ? "GPU" : gpu.name];
    std::vector<std::string> parts;
    for (const auto& [model, count] : models) parts.push_back(std::to_string(count) + " × " + model);
    gpus_of[host.name] = parts.empty() ? "none" : join(parts, ", ");
  }
  auto gpus_text = [&](const std::string& host) {
    auto found = gpus_of.find(host);
    return found == gpus_of.end() ? std::string("?") : found->second;
  };
  const PlanRecord* previous = nullptr;
  for (const auto& [generation, plan] : record.plans) {
    std::string headline = "gen " + std::to_string(generation) + ": world " + std::to_string(plan.world_size) + " = dp " +
                           std::to_string(plan.data) + " × pp " + std::to_string(plan.pipeline) + " × tp " +
                           std::to_string(plan.tensor) + "; global batch " +
                           (plan.global_batch ? std::to_string(plan.global_batch) : std::string("not set")) + " = micro " +
                           std::to_string(plan.micro_batch) + " × dp × grad_accum " + std::to_string(plan.grad_accum);
    // A restart in place keeps the layout: one line says so instead of the same table again.
    if (previous && same_layout(*previous, plan)) {
      out += "<h3 data-gen=\"" + std::to_string(generation) + "\">" + e(headline) + "</h3><p class=\"note\">same hosts and ranks as gen " +
             std::to_string(previous->generation) + "</p>";
      previous = &plan;
      continue;
    }
    previous = &plan;
    out += "<h3 data-gen=\"" + std::to_string(generation) + "\">" + e(headline) + "</h3>";
    if (!plan.without.empty()) out += "<p>without: " + e(join(plan.without, ", ")) + "</p>";
    if (!plan.spares_used.empty()) out += "<p>spares in use: " + e(join(plan.spares_used, ", ")) + "</p>";
    // Up to 8 hosts one per row; more: the first and last few, the rest counted.
    constexpr size_t kShownHosts = 8;
    out += "<table><tr><th>host</th><th>ranks</th><th>GPUs</th></tr>";
    for (size_t i = 0; i < plan.hosts.size(); ++i) {
      bool shown = plan.hosts.size() <= kShownHosts || i < kShownHosts / 2 || i >= plan.hosts.size() - 2;
      if (!shown) {
        if (i == kShownHosts / 2) {
          out += "<tr><td colspan=\"3\" class=\"note\">… " + std::to_string(plan.hosts.size() - kShownHosts / 2 - 2) +
                 " more hosts (plan-" + std::to_string(generation) + ".json)</td></tr>";
        }
        continue;
      }
      const PlanRecord::Host& host = plan.hosts[i];
      std::vector<int> ranks;
      for (const PlanRecord::Rank& rank : host.ranks) ranks.push_back(rank.rank);
      out += "<tr><td>" + e(host.name) + (host.spare ? " (spare)" : "") + "</td><td>" + e(ranges(ranks)) + "</td><td>" +
             e(gpus_text(host.name)) + "</td></tr>";
    }
    out += "</table>";
  }

  // Hosts with the same facts are one row: a thousand-host run has a handful of machine types.
  if (!record.hosts.empty()) {
    struct Group {
      std::vector<std::string> names;
      const HostFacts* facts;
    };
    std::map<std::string, Group> groups;
    for (const HostFacts& host : record.hosts) {
      std::string key = std::to_string(host.cpus) + "|" + std::to_string(host.memory_mb) + "|" + host.topology + "|" + host.version;
      for (const HostFacts::Gpu& gpu : host.gpus) key += "|" + gpu.name;
      auto [group, added] = groups.try_emplace(key, Group{{}, &host});
      group->second.names.push_back(host.name);
    }
    out += "<h3>Hosts (hosts/*.json)</h3><table><tr><th>hosts</th><th>CPUs</th><th>memory</th><th>GPUs</th><th>dtrain</th></tr>";
    std::vector<std::string> topologies;
    for (const auto& [key, group] : groups) {
      std::string names = group.names.size() <= 6 ? join(group.names, ", ")
                                                   : group.names.front() + " … " + group.names.back() + " (" +
                                                         std::to_string(group.names.size()) + " hosts)";
      out += "<tr><td>" + e(names) + "</td><td class=\"n\">" + std::to_string(group.facts->cpus) + "</td><td class=\"n\">" +
             e(human_bytes(static_cast<double>(group.facts->memory_mb) * 1048576.0)) + "</td><td>" +
             e(gpus_text(group.facts->name)) + "</td><td>" + e(group.facts->version) + "</td></tr>";
      if (!group.facts->topology.empty()) {
        topologies.push_back("<h3>GPU topology: " + e(names) + "</h3><pre>" + e(group.facts->topology) + "</pre>");
      }
    }
    out += "</table>";
    for (const std::string& topology : topologies) out += topology;
  }
  return out + "</section>";
}

struct TimeScale {
  int64_t start = 0, end = 1;
  double x0 = 0, width = 1;
  double x(int64_t wall_ms) const {
    return x0 + static_cast<double>(wall_ms - start) / static_cast<double>(std::max<int64_t>(1, end - start)) * width;
  }
};

constexpr double kPageWidth = 1160;
constexpr double kLabelWidth = 150;

TimeScale page_scale(const Timeline& timeline) {
  return {timeline.start_ms, std::max(timeline.end_ms, timeline.start_ms + 1), kLabelWidth, kPageWidth - kLabelWidth - 16};
}

const char* generation_color(int generation) {
  static const char* palette[] = {"#cfe3f7", "#d8eed2", "#f3e0c9", "#e2d7f1", "#d3eeee", "#f4d4dc"};
  return palette[static_cast<size_t>(std::max(0, generation)) % 6];
}

std::string timeline_section(const Timeline& timeline, const ReportLimits& limits) {
  std::string out = "<section id=\"timeline\"><h2>Timeline</h2>";
  if (timeline.generations.empty() && timeline.marks.empty()) return out + "<p>No events with times.</p></section>";
  LaneChoice lanes = choose_lanes(timeline, limits.lanes);
  std::map<std::string, size_t> lane_of;  // host → lane index (0 is the run's own lane)
  for (size_t i = 0; i < lanes.shown.size(); ++i) lane_of[lanes.shown[i]] = i + 1;
  size_t group_lane = lanes.shown.size() + 1;
  size_t lane_count = lanes.shown.size() + 1 + (lanes.grouped ? 1 : 0);
  constexpr double kLane = 24, kTop = 8;
  double height = kTop + kLane * static_cast<double>(lane_count) + 30;
  TimeScale scale = page_scale(timeline);
  auto lane_y = [&](size_t lane) { return kTop + kLane * static_cast<double>(lane) + kLane / 2; };
  auto lane_for = [&](const std::string& host) -> size_t {
    if (host.empty()) return 0;
    auto found = lane_of.find(host);
    return found != lane_of.end() ? found->second : group_lane;
  };

  out += "<svg id=\"timeline-svg\" width=\"" + px(kPageWidth) + "\" height=\"" + px(height) + "\" viewBox=\"0 0 " +
         px(kPageWidth) + " " + px(height) + "\" role=\"img\" aria-label=\"timeline\">";
  // Lane labels and stripes.
  for (size_t lane = 0; lane < lane_count; ++lane) {
    std::string label = lane == 0 ? "run (supervisor)"
                        : lane == group_lane && lanes.grouped ? std::to_string(lanes.grouped) + " other hosts"
                                                               : lanes.shown[lane - 1];
    double y = lane_y(lane);
    out += "<g class=\"lane\" data-host=\"" + e(lane == 0 ? "" : label) + "\"><rect x=\"" + px(kLabelWidth) + "\" y=\"" +
           px(y - kLane / 2 + 1) + "\" width=\"" + px(scale.width) + "\" height=\"" + px(kLane - 2) + "\" fill=\"" +
           (lane % 2 ? "#fafbfc" : "#f3f5f7") + "\"/><text x=\"4\" y=\"" + px(y + 4) + "\">" +
           e(label.size() > 22 ? label.substr(0, 21) + "…" : label) + "</text></g>";
  }
  // Recoveries: a band over every lane, from the decision to the new generation's first step.
  for (const RecoverySpan& span : timeline.recoveries) {
    out += "<rect class=\"recovery-band\" x=\"" + px(scale.x(span.start_ms)) + "\" y=\"" + px(kTop) + "\" width=\"" +
           px(std::max(2.0, scale.x(span.end_ms) - scale.x(span.start_ms))) + "\" height=\"" +
           px(kLane * static_cast<double>(lane_count)) + "\" fill=\"#ffb74d\" fill-opacity=\"0.25\"><title>recovery: " +
           e(span.cause) + " (" + e(span.action) + ", " + e(human_ms(span.end_ms - span.start_ms)) + ")</title></rect>";
  }
  // Generations: a bar in every lane of a host that ran its ranks, and in the run's lane.
  for (const GenerationSpan& span : timeline.generations) {
    double x = scale.x(span.start_ms), w = std::max(1.0, scale.x(span.end_ms) - x);
    std::set<size_t> span_lanes = {0};
    for (const std::string& host : span.hosts) span_lanes.insert(lane_for(host));
    for (size_t lane : span_lanes) {
      out += "<rect class=\"gen\" data-gen=\"" + std::to_string(span.generation) + "\" x=\"" + px(x) + "\" y=\"" +
             px(lane_y(lane) - 6) + "\" width=\"" + px(w) + "\" height=\"12\" fill=\"" + generation_color(span.generation) +
             "\" stroke=\"#b0bec5\" stroke-width=\"0.5\"><title>gen " + std::to_string(span.generation) + ": world " +
             std::to_string(span.world_size) + ", " + e(human_ms(span.end_ms - span.start_ms)) + "</title></rect>";
    }
    if (w > 40) {
      out += "<text x=\"" + px(x + 3) + "\" y=\"" + px(lane_y(0) - 7) + "\">gen " + std::to_string(span.generation) + "</text>";
    }
  }
  // Marks. In the shared lane of grouped hosts, one mark per kind and generation stands for all.
  std::map<std::pair<int, int>, std::pair<const Mark*, int>> grouped_marks;  // (kind, gen) → first, count
  size_t checkpoints = 0;
  for (const Mark& mark : timeline.marks) checkpoints += mark.kind == MarkKind::checkpoint;
  size_t checkpoint_stride = std::max<size_t>(1, (checkpoints + limits.checkpoint_ticks - 1) / std::max<size_t>(1, limits.checkpoint_ticks));
  size_t checkpoint_index = 0;
  auto draw = [&](const Mark& mark, size_t lane, const std::string& label, const std::string& host) {
    out += "<g class=\"mark\" data-kind=\"" + std::string(mark_kind_name(mark.kind)) + "\" data-host=\"" + e(host) +
           "\" data-gen=\"" + std::to_string(mark.generation) + "\"><title>" + e(since(mark.wall_ms, timeline.start_ms)) +
           " " + e(label) + "</title>" + mark_shape(mark.kind, scale.x(mark.wall_ms), lane_y(lane)) + "</g>";
  };
  for (const Mark& mark : timeline.marks) {
    if (mark.kind == MarkKind::checkpoint && checkpoint_index++ % checkpoint_stride != 0) continue;
    size_t lane = lane_for(mark.host);
    if (lane == group_lane && lanes.grouped) {
      auto [entry, added] = grouped_marks.try_emplace({static_cast<int>(mark.kind), mark.generation}, &mark, 0);
      ++entry->second.second;
      continue;
    }
    draw(mark, lane, mark.label + (mark.host.empty() ? "" : " on " + mark.host), mark.host);
  }
  for (const auto& [key, entry] : grouped_marks) {
    const Mark& first = *entry.first;
    std::string label = first.label + " on " + first.host +
                        (entry.second > 1 ? " (and " + std::to_string(entry.second - 1) + " more like it in this lane)" : "");
    draw(first, group_lane, label, first.host);
  }
  out += time_axis(scale.start, scale.end, scale.x0, scale.width, kTop + kLane * static_cast<double>(lane_count) + 4);
  out += "</svg><div class=\"legend\">";
  for (const MarkStyle& style : kMarkStyles) out += legend_item(style.color, style.legend);
  out += legend_item("#ffb74d", "recovery (decision → first step)");
  out += "</div>";
  if (lanes.grouped) {
    out += "<p class=\"note\">" + std::to_string(timeline.hosts.size()) + " hosts: the " +
           std::to_string(lanes.shown.size()) + " with failures first, then in order; the other " +
           std::to_string(lanes.grouped) + " share the last lane (one mark per kind and generation). timeline.json has every host and rank.</p>";
  }

  // The moments that matter as a table (searchable, and what a screen reader gets).
  out += "<h3>Key moments</h3><table id=\"moments\"><tr><th>when</th><th>what</th><th>gen</th><th>where</th><th>detail</th></tr>";
  size_t rows = 0, hidden = 0;
  std::set<std::pair<int, int>> shown_spawn_stop;  // (kind, gen): spawns and stops once per generation
  for (const Mark& mark : timeline.marks) {
    if (mark.kind == MarkKind::checkpoint) continue;
    if (mark.kind == MarkKind::spawn || mark.kind == MarkKind::stop) {
      if (!shown_spawn_stop.insert({static_cast<int>(mark.kind), mark.generation}).second) continue;
    }
    if (rows >= limits.table_rows) {
      ++hidden;
      continue;
    }
    ++rows;
    out += "<tr class=\"moment\" data-kind=\"" + std::string(mark_kind_name(mark.kind)) + "\"><td>" +
           e(since(mark.wall_ms, timeline.start_ms)) + "</td><td><b style=\"color:" + mark_color(mark.kind) + "\">" +
           mark_kind_name(mark.kind) + "</b></td><td class=\"n\">" + std::to_string(mark.generation) + "</td><td>" +
           e(mark.host.empty() ? "run" : mark.host) + "</td><td>" + e(mark.label) + "</td></tr>";
  }
  out += "</table>";
  if (hidden) out += "<p class=\"note\">" + std::to_string(hidden) + " more moments in timeline.json.</p>";
  return out + "</section>";
}

/// One curve chart: the mean as a line, the min-max range as a band, failures as dashed lines.
std::string curve_chart(const std::string& id, const std::string& title, const std::string& unit,
                        const std::vector<Bucket>& buckets, const Timeline& timeline) {
  constexpr double kHeight = 190, kTop = 12, kPlot = 140;
  TimeScale scale = page_scale(timeline);
  std::string out = "<h3>" + e(title) + "</h3>";
  if (buckets.empty()) return out + "<p class=\"note\">No " + e(title) + " in metrics.jsonl.</p>";
  double low = buckets.front().min, high = buckets.front().max;
  for (const Bucket& bucket : buckets) {
    low = std::min(low, bucket.min);
    high = std::max(high, bucket.max);
  }
  if (high - low < 1e-12) {
    high += 0.5 * std::max(1e-9, std::fabs(high));
    low -= 0.5 * std::max(1e-9, std::fabs(low));
  }
  auto y = [&](double value) { return kTop + kPlot - (value - low) / (high - low) * kPlot; };
  auto x = [&](const Bucket& bucket) { return scale.x(static_cast<int64_t>((bucket.x0 + bucket.x1) / 2)); };
  out += "<svg id=\"" + id + "\" width=\"" + px(kPageWidth) + "\" height=\"" + px(kHeight) + "\" viewBox=\"0 0 " + px(kPageWidth) +
         " " + px(kHeight) + "\" role=\"img\" aria-label=\"" + e(title) + "\">";
  out += "<rect x=\"" + px(scale.x0) + "\" y=\"" + px(kTop) + "\" width=\"" + px(scale.width) + "\" height=\"" + px(kPlot) +
         "\" fill=\"#fafbfc\" stroke=\"#e1e4e8\"/>";
  for (double fraction : {0.0, 0.5, 1.0}) {
    double value = low + (high - low) * fraction;
    out += "<text x=\"" + px(scale.x0 - 6) + "\" y=\"" + px(y(value) + 4) + "\" text-anchor=\"end\">" + e(number(value)) +
           (fraction == 1.0 ? " " + e(unit) : "") + "</text>";
  }
  for (const RecoverySpan& span : timeline.recoveries) {
    out += "<rect x=\"" + px(scale.x(span.start_ms)) + "\" y=\"" + px(kTop) + "\" width=\"" +
           px(std::max(2.0, scale.x(span.end_ms) - scale.x(span.start_ms))) + "\" height=\"" + px(kPlot) +
           "\" fill=\"#ffb74d\" fill-opacity=\"0.25\"/>";
  }
  std::string band_top, band_bottom, line;
  for (const Bucket& bucket : buckets) {
    band_top += (band_top.empty() ? "M" : "L") + px(x(bucket)) + " " + px(y(bucket.max));
    line += (line.empty() ? "M" : "L") + px(x(bucket)) + " " + px(y(bucket.mean));
  }
  for (auto bucket = buckets.rbegin(); bucket != buckets.rend(); ++bucket) {
    band_bottom += "L" + px(x(*bucket)) + " " + px(y(bucket->min));
  }
  out += "<path d=\"" + band_top + band_bottom + "Z\" fill=\"#90caf9\" fill-opacity=\"0.45\" stroke=\"none\"/>";
  out += "<path d=\"" + line + "\" fill=\"none\" stroke=\"#1565c0\" stroke-width=\"1.5\"/>";
  if (buckets.size() == 1) {
    out += "<circle cx=\"" + px(x(buckets[0])) + "\" cy=\"" + px(y(buckets[0].mean)) + "\" r=\"3\" fill=\"#1565c0\"/>";
  }
  for (const Mark& mark : timeline.marks) {
    if (!is_failure(mark.kind)) continue;
    double mx = scale.x(mark.wall_ms);
    out += "<g class=\"fault-marker\" data-kind=\"" + std::string(mark_kind_name(mark.kind)) + "\"><title>" +
           e(since(mark.wall_ms, timeline.start_ms) + " " + mark.label) + "</title><path d=\"M" + px(mx) + " " + px(kTop) +
           "v" + px(kPlot) + "\" stroke=\"" + mark_color(mark.kind) + "\" stroke-width=\"1.5\" stroke-dasharray=\"4 3\"/>" +
           mark_shape(mark.kind, mx, kTop + 6) + "</g>";
  }
  out += time_axis(scale.start, scale.end, scale.x0, scale.width, kTop + kPlot + 4);
  return out + "</svg>";
}

std::string curves_section(const RunRecord& record, const Timeline& timeline, const ReportLimits& limits) {
  std::vector<Point> loss, step_ms;
  for (const TrainingSample& sample : record.training) {
    double t = static_cast<double>(sample.wall_ms);
    if (sample.summary) {
      if (sample.loss) loss.push_back({t, sample.loss->median});
      if (sample.step_ms) {
        for (double value : {sample.step_ms->min, sample.step_ms->median, sample.step_ms->max}) step_ms.push_back({t, value});
      }
      continue;
    }
    double sum = 0;
    int count = 0;
    for (const RankSample& rank : sample.ranks) {
      if (rank.loss) {
        sum += *rank.loss;
        ++count;
      }
      if (rank.step_ms) step_ms.push_back({t, *rank.step_ms});
    }
    if (count) loss.push_back({t, sum / count});
  }
  std::string out = "<section id=\"curves\"><h2>Loss and step time</h2>";
  out += "<p class=\"note\">From metrics.jsonl (" + std::to_string(record.training.size()) +
         " samples, bucketed to at most " + std::to_string(limits.curve_points) +
         " points): the line is the mean, the band the range over ranks and the bucket. Dashed lines are failures, "
         "orange bands recoveries.</p>";
  out += curve_chart("loss-chart", "loss", "", bucket_series(loss, limits.curve_points), timeline);
  out += curve_chart("step-time-chart", "step time", "ms", bucket_series(step_ms, limits.curve_points), timeline);
  return out + "</section>";
}

std::string heat_color(double value, double low, double high) {
  double t = high > low ? (value - low) / (high - low) : 0.0;
  t = std::clamp(t, 0.0, 1.0);
  // Pale yellow (fast) to dark red (slow).
  int hue = static_cast<int>(std::lround(55 - 55 * t));
  int light = static_cast<int>(std::lround(88 - 50 * t));
  return "hsl(" + std::to_string(hue) + ",90%," + std::to_string(light) + "%)";
}

int world_size_of(const RunRecord& record) {
  int world = 0;
  for (const auto& [generation, plan] : record.plans) world = std::max(world, plan.world_size);
  for (const json& event : record.events) {
    std::string name = json_string(event, "ev");
    if (name == events::kRunSubmitted || name == events::kPlanGeneration) world = std::max(world, int_field(event, "world_size", 0));
  }
  return world;
}

std::string heat_map_section(const RunRecord& record, const Timeline& timeline, const ReportLimits& limits) {
  std::string out = "<section id=\"heatmap\"><h2>Step time per rank</h2>";
  HeatMap map = step_time_heat_map(record.training, world_size_of(record), limits.heat_rows, limits.heat_columns);
  if (map.rows.empty() || map.columns == 0 || map.max <= 0) {
    return out + "<p class=\"note\">No per-rank step times in metrics.jsonl.</p></section>";
  }
  TimeScale scale = page_scale(timeline);
  double row_height = std::clamp(480.0 / static_cast<double>(map.rows.size()), 5.0, 16.0);
  double height = row_height * static_cast<double>(map.rows.size()) + 34;
  out += "<p class=\"note\">Each row is " +
         std::string(map.rows.front().first_rank == map.rows.front().last_rank ? "one rank" : "a block of ranks (its slowest rank)") +
         ", each column " + e(human_ms(map.column_ms)) + " of wall time; darker is slower (" + e(number(map.min)) + " to " +
         e(number(map.max)) + " ms). A straggler is a dark row.</p>";
  out += "<svg id=\"heatmap-svg\" width=\"" + px(kPageWidth) + "\" height=\"" + px(height) + "\" viewBox=\"0 0 " + px(kPageWidth) +
         " " + px(height) + "\" role=\"img\" aria-label=\"step time per rank\">";
  size_t label_every = std::max<size_t>(1, static_cast<size_t>(std::ceil(11.0 / row_height)));
  for (size_t row = 0; row < map.rows.size(); ++row) {
    const HeatMap::Row& ranks = map.rows[row];
    std::string name = ranks.first_rank == ranks.last_rank ? "rank " + std::to_string(ranks.first_rank)
                                                            : "ranks " + std::to_string(ranks.first_rank) + "-" + std::to_string(ranks.last_rank);
    double y = 4 + row_height * static_cast<double>(row);
    out += "<g class=\"heat-row\" data-ranks=\"" + e(name) + "\"><title>" + e(name) + "</title>";
    if (row % label_every == 0) out += "<text x=\"" + px(kLabelWidth - 6) + "\" y=\"" + px(y + row_height - 1) + "\" text-anchor=\"end\">" + e(name) + "</text>";
    for (size_t column = 0; column < map.columns; ++column) {
      double value = map.at(row, column);
      if (std::isnan(value)) continue;
      int64_t begin = map.start_ms + map.column_ms * static_cast<int64_t>(column);
      double x0 = scale.x(begin), x1 = scale.x(begin + map.column_ms);
      out += "<rect x=\"" + px(x0) + "\" y=\"" + px(y) + "\" width=\"" + px(std::max(1.0, x1 - x0)) + "\" height=\"" +
             px(row_height) + "\" fill=\"" + heat_color(value, map.min, map.max) + "\"/>";
    }
    out += "</g>";
  }
  out += time_axis(scale.start, scale.end, scale.x0, scale.width, 6 + row_height * static_cast<double>(map.rows.size()));
  out += "</svg>";

  // The slowest rows, as numbers: which ranks to look at.
  struct Slow {
    size_t row;
    double mean;
  };
  std::vector<Slow> slow;
  std::vector<double> all;
  for (size_t row = 0; row < map.rows.size(); ++row) {
    double sum = 0;
    int count = 0;
    for (size_t column = 0; column < map.columns; ++column) {
      if (std::isnan(map.at(row, column))) continue;
      sum += map.at(row, column);
      ++count;
    }
    if (count) {
      slow.push_back({row, sum / count});
      all.push_back(sum / count);
    }
  }
  if (all.size() >= 2) {
    std::sort(all.begin(), all.end());
    double median = all[all.size() / 2];
    std::sort(slow.begin(), slow.end(), [](const Slow& a, const Slow& b) { return a.mean > b.mean; });
    out += "<table id=\"slowest\"><tr><th>slowest</th><th>mean step time</th><th>× median</th></tr>";
    for (size_t i = 0; i < slow.size() && i < 5; ++i) {
      const HeatMap::Row& ranks = map.rows[slow[i].row];
      std::string name = ranks.first_rank == ranks.last_rank ? "rank " + std::to_string(ranks.first_rank)
                                                              : "ranks " + std::to_string(ranks.first_rank) + "-" + std::to_string(ranks.last_rank);
      out += "<tr><td>" + e(name) + "</td><td class=\"n\">" + e(number(slow[i].mean)) + " ms</td><td class=\"n\">" +
             (median > 0 ? fixed(slow[i].mean / median, 2) : "-") + "</td></tr>";
    }
    out += "</table>";
  }
  return out + "</section>";
}

std::string checkpoints_section(const RunRecord& record, const Timeline& timeline, const ReportLimits& limits) {
  std::vector<const json*> committed = events_named(record, events::kCheckpointCommitted);
  std::vector<const json*> rejected = events_named(record, events::kCheckpointRejected);
  std::string out = "<section id=\"checkpoints\"><h2>Checkpoints</h2>";
  if (committed.empty() && rejected.empty()) return out + "<p>No checkpoint events.</p></section>";
  int64_t total_bytes = 0;
  double total_seconds = 0;
  for (const json* event : committed) {
    total_bytes += json_int(*event, "bytes").value_or(0);
    total_seconds += json_number(*event, "seconds").value_or(0);
  }
  out += "<p>" + std::to_string(committed.size()) + " committed (" + e(human_bytes(static_cast<double>(total_bytes))) +
         " written, " + fixed(total_seconds, 2) + " s saving), " + std::to_string(rejected.size()) + " rejected.</p>";
  // Newest first: the ones a resume would use.
  std::vector<const json*> rows = committed;
  rows.insert(rows.end(), rejected.begin(), rejected.end());
  std::stable_sort(rows.begin(), rows.end(), [](const json* a, const json* b) {
    return json_string(*a, "ts") > json_string(*b, "ts");
  });
  out += "<table><tr><th>when</th><th>step</th><th>gen</th><th>size</th><th>save time</th><th>verified</th><th>by</th></tr>";
  for (size_t i = 0; i < rows.size() && i < limits.checkpoint_rows; ++i) {
    const json& event = *rows[i];
    bool ok = json_string(event, "ev") == events::kCheckpointCommitted;
    std::optional<int64_t> at = event_wall_ms(event);
    std::optional<double> seconds = json_number(event, "seconds");
    out += std::string("<tr class=\"checkpoint\" data-verified=\"") + (ok ? "yes" : "no") + "\"><td>" +
           e(at ? since(*at, timeline.start_ms) : "?") + "</td><td class=\"n\">" + std::to_string(int_field(event, "step", 0)) +
           "</td><td class=\"n\">" + std::to_string(int_field(event, "gen", 0)) + "</td><td class=\"n\">" +
           (ok ? e(human_bytes(static_cast<double>(json_int(event, "bytes").value_or(0)))) : "-") + "</td><td class=\"n\">" +
           (seconds ? fixed(*seconds, 3) + " s" : "-") + "</td><td>" +
           (ok ? std::string("yes: every shard and the manifest") : "no: " + e(json_string(event, "reason"))) + "</td><td>" +
           e("rank " + std::to_string(int_field(event, "rank", 0)) + " on " + json_string(event, "host")) + "</td></tr>";
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
  std::vector<const json*> released = events_named(record, events::kResourcesReleased);
  std::vector<const json*> unconfirmed = events_named(record, events::kResourcesUnconfirmed);
  if (released.empty() && unconfirmed.empty()) out += "<p>No release events.</p>";
  // Per generation: how many hosts confirmed, processes killed, any left, slowest host.
  struct Summary {
    int hosts = 0;
    int64_t killed = 0, remaining = 0, slowest_ms = 0;
    std::string slowest_host;
  };
  std::map<int, Summary> by_generation;
  for (const json* event : released) {
    Summary& summary = by_generation[int_field(*event, "gen", 0)];
    ++summary.hosts;
    if (const json* killed = json_member(*event, "killed"); killed && killed->is_array()) summary.killed += static_cast<int64_t>(killed->size());
    summary.remaining += json_int(*event, "remaining").value_or(0);
    int64_t ms = json_int(*event, "ms").value_or(0);
    if (ms >= summary.slowest_ms) {
      summary.slowest_ms = ms;
      summary.slowest_host = json_string(*event, "host");
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
  for (const json* event : unconfirmed) {
    out += "<p class=\"warn\">Not confirmed: " + e(json_compact(json_member(*event, "hosts") ? (*event)["hosts"] : json())) + " — " +
           e(json_string(*event, "detail")) + "</p>";
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

}  // namespace

std::string html_escape(std::string_view text) {
  std::string out;
  out.reserve(text.size() + text.size() / 8);
  static const char* kReplacement = "\xEF\xBF\xBD";
  for (size_t i = 0; i < text.size();) {
    auto byte = static_cast<unsigned char>(text[i]);
    if (byte < 0x80) {
      switch (byte) {
        case '&': out += "&amp;"; break;
        case '<': out += "&lt;"; break;
        case '>': out += "&gt;"; break;
        case '"': out += "&quot;"; break;
        case '\'': out += "&#39;"; break;
        default:
          if ((byte < 0x20 && byte != '\n' && byte != '\t') || byte == 0x7f) out += kReplacement;
          else out += static_cast<char>(byte);
      }
      ++i;
      continue;
    }
    // A well-formed UTF-8 sequence passes as it is (no overlongs, no surrogates); any other
    // byte becomes U+FFFD on its own.
    size_t length = byte >= 0xC2 && byte <= 0xDF ? 2 : byte >= 0xE0 && byte <= 0xEF ? 3 : byte >= 0xF0 && byte <= 0xF4 ? 4 : 0;
    bool valid = length > 0 && i + length <= text.size();
    for (size_t k = 1; valid && k < length; ++k) valid = (static_cast<unsigned char>(text[i + k]) & 0xC0) == 0x80;
    if (valid && length >= 3) {
      auto second = static_cast<unsigned char>(text[i + 1]);
      if (byte == 0xE0 && second < 0xA0) valid = false;  // overlong
      if (byte == 0xED && second >= 0xA0) valid = false;  // surrogate
      if (byte == 0xF0 && second < 0x90) valid = false;  // overlong
      if (byte == 0xF4 && second >= 0x90) valid = false;  // beyond U+10FFFF
    }
    if (!valid) {
      out += kReplacement;
      ++i;
      continue;
    }
    out.append(text.substr(i, length));
    i += length;
  }
  return out;
}

std::string render_html(const RunRecord& record, const Timeline& timeline, const ReportLimits& limits) {
  std::string name = record.run_id;
  if (const json* submitted = last_event(record, events::kRunSubmitted)) name = json_string(*submitted, "name", name);
  std::string out = "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
                    "<meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">"
                    "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; img-src data:\">"
                    "<title>dtrain report: " + e(record.run_id) + "</title><style>" + kStyle + "</style></head><body><main>";
  out += "<h1>dtrain report: " + e(record.run_id) + "</h1><p class=\"sub\">job " + e(name) + " · run directory " +
         e(record.dir) + " · " + std::to_string(record.events.size()) + " events · made by dtrain " + kVersion + "</p>";
  out += outcome_section(record, timeline);
  out += plan_section(record);
  out += timeline_section(timeline, limits);
  out += curves_section(record, timeline, limits);
  out += heat_map_section(record, timeline, limits);
  out += checkpoints_section(record, timeline, limits);
  out += recovery_section(timeline, limits);
  out += goodput_section(record, timeline);
  out += resources_section(record, timeline, limits);
  out += problems_section(record);
  out += "</main></body></html>\n";
  return out;
}

}  // namespace dtrain::report
