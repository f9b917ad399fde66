#include "launcher/metrics/step_split.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace dtrain::metrics {

namespace {

std::string ms(double value) {
  char text[32];
  std::snprintf(text, sizeof text, value >= 100 ? "%.0f ms" : "%.1f ms", value);
  return text;
}

std::string percent(double share) {
  return std::to_string(static_cast<int>(std::lround(std::clamp(share, 0.0, 1.0) * 100))) + "%";
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  size_t n = values.size();
  return n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

/// A rank's samples, averaged and split. Measurement windows are not exact (data and comm are
/// summed between two optimizer steps, the step time is the gap between them): when the parts
/// overrun the step, the step is taken as their sum and compute as 0.
StepParts split(double step_ms, double data_ms, double comm_ms) {
  StepParts parts{.step_ms = step_ms, .data_ms = std::max(0.0, data_ms), .comm_ms = std::max(0.0, comm_ms)};
  parts.step_ms = std::max(parts.step_ms, parts.data_ms + parts.comm_ms);
  parts.compute_ms = parts.step_ms - parts.data_ms - parts.comm_ms;
  return parts;
}

/// The rank whose own work (data + compute) stands out so far that the others' time in
/// collectives is mostly waiting for it: above the median by at least half the mean time in
/// collectives, which must itself be a tenth of the step or more.
std::optional<int> rank_waited_for(const StepSplit& split) {
  const RankStepSplit* slowest = nullptr;
  size_t counted = 0;
  for (const RankStepSplit& rank : split.ranks) {
    if (rank.rank == kTypicalRank) continue;
    ++counted;
    if (slowest == nullptr || rank.parts.busy_ms() > slowest->parts.busy_ms()) slowest = &rank;
  }
  const StepParts& mean = split.mean;
  if (counted < 2 || mean.step_ms <= 0 || mean.comm_ms < 0.1 * mean.step_ms) return std::nullopt;
  if (slowest->parts.busy_ms() - split.median_busy_ms < 0.5 * mean.comm_ms) return std::nullopt;
  return slowest->rank;
}

}  // namespace

std::string_view to_string(StepPart part) {
  switch (part) {
    case StepPart::data: return "data";
    case StepPart::communication: return "communication";
    case StepPart::compute: return "compute";
  }
  return "compute";
}

double StepParts::of(StepPart part) const {
  switch (part) {
    case StepPart::data: return data_ms;
    case StepPart::communication: return comm_ms;
    case StepPart::compute: return compute_ms;
  }
  return 0;
}

double StepSplit::share(StepPart part) const { return mean.step_ms > 0 ? mean.of(part) / mean.step_ms : 0; }

std::string StepSplit::shares_text(std::string_view separator) const {
  std::string sep(separator);
  return "input " + percent(share(StepPart::data)) + sep + "collectives " + percent(share(StepPart::communication)) + sep +
         "compute " + percent(share(StepPart::compute)) + " of " + ms(mean.step_ms) + " a step";
}

std::string StepSplit::verdict() const {
  if (!bottleneck) {
    return "No rank reported its time waiting for input or in collectives, so the step time cannot be split "
           "(dtrain-train, scripts using dtrain_worker and unmodified PyTorch scripts under the bootstrap report them).";
  }
  std::string shares = shares_text();
  const RankStepSplit* waited = nullptr;
  for (const RankStepSplit& rank : ranks) {
    if (waited_for && rank.rank == *waited_for) waited = &rank;
  }
  std::string waiting;
  if (waited != nullptr) {
    waiting = "rank " + std::to_string(waited->rank) + "'s own work takes " + ms(waited->parts.busy_ms()) +
              " a step against a median of " + ms(median_busy_ms) + " (" +
              (waited->parts.data_ms > waited->parts.compute_ms ? "mostly waiting for input" : "mostly compute") +
              "), and the other ranks wait for it in collectives";
  }
  switch (*bottleneck) {
    case StepPart::data:
      return "Data reading: ranks wait for input " + percent(share(StepPart::data)) + " of the step (" + shares +
             "). Look at the input pipeline: DataLoader workers and prefetching, pinned memory, the storage's throughput.";
    case StepPart::communication:
      if (waited != nullptr) {
        return "Communication: " + waiting + " (" + shares + "). Look at rank " + std::to_string(waited->rank) +
               ": its host, its input and its device.";
      }
      return "Communication: ranks spend " + percent(share(StepPart::communication)) +
             " of the step in collectives and no rank's own work stands out, so the collectives themselves are slow (" +
             shares + "). Look at the network, the plan's topology and the gradient bucket sizes.";
    case StepPart::compute:
      if (waited != nullptr) return "Compute, unevenly: " + waiting + " (" + shares + ").";
      return "Compute: ranks compute " + percent(share(StepPart::compute)) + " of the step (" + shares +
             "); neither input nor collectives hold them back.";
  }
  return {};
}

void StepSplitBuilder::add(int rank, const contract::BeatMetrics& metrics) {
  if (!metrics.step_ms || !std::isfinite(*metrics.step_ms) || *metrics.step_ms < 0) return;
  Sums& sums = ranks_[rank];
  sums.step_ms += *metrics.step_ms;
  if (metrics.data_ms && std::isfinite(*metrics.data_ms)) {
    sums.data_ms += *metrics.data_ms;
    any_data_ = true;
  }
  if (metrics.comm_ms && std::isfinite(*metrics.comm_ms)) {
    sums.comm_ms += *metrics.comm_ms;
    any_comm_ = true;
  }
  ++sums.samples;
}

StepSplit StepSplitBuilder::build() const {
  StepSplit out;
  double step = 0, data = 0, comm = 0;
  std::vector<std::pair<int, Sums>> ranks(ranks_.begin(), ranks_.end());
  std::sort(ranks.begin(), ranks.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  out.ranks.reserve(ranks.size());
  for (const auto& [rank, sums] : ranks) {
    auto n = static_cast<double>(sums.samples);
    RankStepSplit row{.rank = rank, .parts = split(sums.step_ms / n, sums.data_ms / n, sums.comm_ms / n), .samples = sums.samples};
    step += row.parts.step_ms;
    data += row.parts.data_ms;
    comm += row.parts.comm_ms;
    out.ranks.push_back(row);
  }
  if (out.ranks.empty()) return out;
  auto n = static_cast<double>(out.ranks.size());
  out.mean = split(step / n, data / n, comm / n);
  if (any_data_ || any_comm_) {
    StepPart lead = StepPart::compute;
    for (StepPart part : {StepPart::data, StepPart::communication}) {
      if (out.mean.of(part) > out.mean.of(lead)) lead = part;
    }
    out.bottleneck = lead;
    std::vector<double> busy;
    for (const RankStepSplit& row : out.ranks) {
      if (row.rank != kTypicalRank) busy.push_back(row.parts.busy_ms());
    }
    if (!busy.empty()) out.median_busy_ms = median(busy);
    out.waited_for = rank_waited_for(out);
  }
  return out;
}

}  // namespace dtrain::metrics
