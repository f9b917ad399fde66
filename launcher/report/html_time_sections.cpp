// report.html's sections drawn over time: the timeline of generations and marks in host
// lanes, the loss and step-time curves, and the per-rank step-time heat map.

#include "launcher/report/html_parts.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>

#include "launcher/base/clock.h"
#include "launcher/base/json_fields.h"
#include "launcher/base/strings.h"
#include "launcher/report/downsample.h"
#include "worker/contract/beat_metrics.h"

namespace dtrain::report::page {

using nlohmann::json;

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

/// A beat metric's axis: milliseconds as they are, bytes in GiB.
std::pair<double, std::string> axis_unit(const contract::BeatMetric& metric) {
  switch (metric.unit) {
    case contract::MetricUnit::milliseconds: return {1.0, "ms"};
    case contract::MetricUnit::bytes: return {1.0 / (1024.0 * 1024.0 * 1024.0), "GiB"};
    case contract::MetricUnit::plain: break;
  }
  return {1.0, ""};
}

std::string curves_section(const RunRecord& record, const Timeline& timeline, const ReportLimits& limits) {
  std::string charts;
  for (size_t i = 0; i < contract::kBeatMetrics.size(); ++i) {
    const contract::BeatMetric& metric = contract::kBeatMetrics[i];
    if ((metric.shown & contract::kInMetricsLine) == 0) continue;
    auto [scale, unit] = axis_unit(metric);
    // Every rank's value at its time (a summary line: the spread's min, median and max).
    std::vector<Point> points;
    for (const TrainingSample& sample : record.training) {
      double t = static_cast<double>(sample.wall_ms);
      if (const std::optional<Spread>& spread = sample.spreads[i]; sample.summary && spread) {
        for (double value : {spread->min, spread->median, spread->max}) points.push_back({t, value * scale});
        continue;
      }
      for (const RankSample& rank : sample.ranks) {
        if (const std::optional<double>& value = rank.metrics.*metric.field) points.push_back({t, *value * scale});
      }
    }
    if (points.empty()) continue;  // a metric no rank reported (the accelerator's on a CPU run)
    std::string id(metric.key);
    std::replace(id.begin(), id.end(), '_', '-');
    charts += curve_chart(id + "-chart", std::string(metric.title), unit, bucket_series(points, limits.curve_points),
                          timeline);
  }
  std::string out = "<section id=\"curves\"><h2>Training curves</h2>";
  out += "<p class=\"note\">From metrics.jsonl (" + std::to_string(record.training.size()) +
         " samples, bucketed to at most " + std::to_string(limits.curve_points) +
         " points): the line is the mean, the band the range over ranks and the bucket. Dashed lines are failures, "
         "orange bands recoveries.</p>";
  if (charts.empty()) charts = "<p class=\"note\">No rank reported a loss, a step time or another metric.</p>";
  return out + charts + "</section>";
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
  for (const LoggedEvent& event : record.events) {
    if (const auto* submitted = std::get_if<events::RunSubmitted>(&event.event)) world = std::max(world, submitted->world_size);
    if (const auto* plan = std::get_if<events::PlanGeneration>(&event.event)) world = std::max(world, plan->world_size);
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

}  // namespace dtrain::report::page
