// report.html's "Where the step time goes": each rank's step split into waiting for input,
// collectives and compute (launcher/metrics/step_split.h: the same rule as the Prometheus
// families), the job's mean, and the bottleneck named in words.

#include "launcher/report/html_parts.h"

#include <algorithm>

#include "launcher/metrics/step_split.h"

namespace dtrain::report::page {

namespace {

using metrics::StepPart;

struct PartStyle {
  StepPart part;
  const char* label;
  const char* color;
};
constexpr PartStyle kParts[] = {{StepPart::data, "waiting for input", "#42a5f5"},
                                {StepPart::communication, "in collectives", "#ff9800"},
                                {StepPart::compute, "compute", "#66bb6a"}};

std::string rank_name(int rank) {
  return rank == metrics::kTypicalRank ? "median rank" : "rank " + std::to_string(rank);
}

/// One labelled stacked bar at y, scaled so that `longest` fills the plot.
std::string split_bar(const std::string& name, const metrics::StepParts& parts, double longest, double y, double height) {
  constexpr double kBarWidth = kPageWidth - kLabelWidth - 120;
  std::string out = "<g class=\"split-row\" data-name=\"" + e(name) + "\"><text x=\"" + px(kLabelWidth - 6) + "\" y=\"" +
                    px(y + height - 3) + "\" text-anchor=\"end\">" + e(name) + "</text>";
  double x = kLabelWidth;
  for (const PartStyle& style : kParts) {
    double value = parts.of(style.part);
    double w = longest > 0 ? value / longest * kBarWidth : 0;
    if (w <= 0) continue;
    out += "<rect class=\"split-part\" data-part=\"" + std::string(metrics::to_string(style.part)) + "\" data-ms=\"" +
           fixed(value, 2) + "\" x=\"" + px(x) + "\" y=\"" + px(y) + "\" width=\"" + px(std::max(0.5, w)) + "\" height=\"" +
           px(height) + "\" fill=\"" + style.color + "\"><title>" + e(name + ": " + style.label + " " + fixed(value, 1)) +
           " ms</title></rect>";
    x += w;
  }
  out += "<text x=\"" + px(x + 6) + "\" y=\"" + px(y + height - 3) + "\">" + e(fixed(parts.step_ms, 1)) + " ms</text>";
  return out + "</g>";
}

}  // namespace

metrics::StepSplit step_split_of(const RunRecord& record) {
  metrics::StepSplitBuilder builder;
  for (const TrainingSample& sample : record.training) {
    if (sample.summary) {  // beyond 64 ranks: the median rank stands for the rest
      auto median = [&](std::optional<double> contract::BeatMetrics::*field) -> std::optional<double> {
        const std::optional<Spread>& spread = sample.spread(field);
        return spread ? std::optional<double>(spread->median) : std::nullopt;
      };
      builder.add(metrics::kTypicalRank, {.step_ms = median(&contract::BeatMetrics::step_ms),
                                          .comm_ms = median(&contract::BeatMetrics::comm_ms),
                                          .data_ms = median(&contract::BeatMetrics::data_ms)});
    }
    for (const RankSample& rank : sample.ranks) builder.add(rank.rank, rank.metrics);
  }
  return builder.build();
}

std::string step_split_section(const RunRecord& record, const ReportLimits& limits) {
  std::string out = "<section id=\"step-split\"><h2>Where the step time goes</h2>";
  metrics::StepSplit split = step_split_of(record);
  if (split.ranks.empty()) return out + "<p class=\"note\">No per-rank step times in metrics.jsonl.</p></section>";
  if (!split.bottleneck) return out + "<p id=\"bottleneck\" class=\"note\" data-part=\"\">" + e(split.verdict()) + "</p></section>";
  out += "<p id=\"bottleneck\" data-part=\"" + std::string(metrics::to_string(*split.bottleneck)) + "\"" +
         (split.waited_for ? " data-waited-for=\"" + std::to_string(*split.waited_for) + "\"" : std::string()) + "><b>" +
         e(split.verdict()) + "</b></p>";

  // The job's mean first, then the ranks: every rank up to the cap, else the ones that stand
  // out most (longest own work) — the median rank of summary lines among them.
  std::vector<metrics::RankStepSplit> rows = split.ranks;
  size_t shown = std::min(rows.size(), limits.heat_rows);
  if (shown < rows.size()) {
    std::partial_sort(rows.begin(), rows.begin() + static_cast<std::ptrdiff_t>(shown), rows.end(),
                      [](const auto& a, const auto& b) { return a.parts.busy_ms() > b.parts.busy_ms(); });
    rows.resize(shown);
    std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.rank < b.rank; });
  }
  double longest = split.mean.step_ms;
  for (const auto& row : rows) longest = std::max(longest, row.parts.step_ms);
  constexpr double kRow = 16, kGap = 4;
  double height = (kRow + kGap) * static_cast<double>(rows.size() + 1) + 8;
  out += "<svg id=\"step-split-svg\" width=\"" + px(kPageWidth) + "\" height=\"" + px(height) + "\" viewBox=\"0 0 " +
         px(kPageWidth) + " " + px(height) + "\" role=\"img\" aria-label=\"step time by part, per rank\">";
  out += split_bar("mean of ranks", split.mean, longest, 4, kRow);
  for (size_t i = 0; i < rows.size(); ++i) {
    out += split_bar(rank_name(rows[i].rank), rows[i].parts, longest, 4 + (kRow + kGap) * static_cast<double>(i + 1), kRow);
  }
  out += "</svg><div class=\"legend\">";
  for (const PartStyle& style : kParts) out += legend_item(style.color, style.label);
  out += "</div><p class=\"note\">Means over metrics.jsonl of each rank's reported step time (step_ms), time waiting for input "
         "(data_ms) and time in collectives (comm_ms); compute is the rest. " +
         (rows.size() < split.ranks.size()
              ? std::to_string(rows.size()) + " of " + std::to_string(split.ranks.size()) + " ranks shown: those with the longest own work. "
              : std::string()) +
         "Unmodified PyTorch scripts: input is the DataLoader's wait, collectives the host's wait in torch.distributed calls "
         "and in DDP's gradient all-reduce; on CUDA, GPU time not waited for counts as compute.</p>";
  return out + "</section>";
}

}  // namespace dtrain::report::page
