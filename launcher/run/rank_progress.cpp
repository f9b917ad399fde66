#include "launcher/run/rank_progress.h"

#include <algorithm>

namespace dtrain::run {

using nlohmann::json;

void RankProgressTable::reset_rank(int rank) {
  if (rank >= 0 && static_cast<size_t>(rank) < ranks_.size()) ranks_[static_cast<size_t>(rank)] = RankProgress{};
}

void RankProgressTable::hello(int rank) {
  if (rank >= 0 && static_cast<size_t>(rank) < ranks_.size()) ranks_[static_cast<size_t>(rank)].speaks_protocol = true;
}

void RankProgressTable::beat(int rank, const proto::WorkerBeat& beat, int64_t wall_ms) {
  if (rank < 0 || static_cast<size_t>(rank) >= ranks_.size()) return;
  RankProgress& progress = ranks_[static_cast<size_t>(rank)];
  progress.last_beat_wall_ms = wall_ms;
  progress.speaks_protocol = true;
  // A beat without a field keeps the last value (workers report some only now and then).
  for (const contract::BeatMetric& metric : contract::kBeatMetrics) {
    if (const std::optional<double>& value = beat.metrics.*metric.field) progress.metrics.*metric.field = value;
  }
}

std::vector<RunSnapshot::Rank> RankProgressTable::state_rows(const supervisor::Supervisor& supervisor) const {
  std::vector<RunSnapshot::Rank> rows;
  rows.reserve(std::min(supervisor.ranks().size(), supervisor.current_plan().ranks.size()));
  for_each_rank(supervisor, [&](const RankRow& rank) {
    if (!rank.slot) return;
    RunSnapshot::Rank& row = rows.emplace_back();
    row.rank = rank.slot->rank;
    row.host = rank.slot->host;
    row.local_rank = rank.slot->local_rank;
    row.dp = rank.slot->dp;
    row.pp = rank.slot->pp;
    row.tp = rank.slot->tp;
    if (rank.status.pid != 0) row.pid = rank.status.pid;
    row.state = supervisor::to_string(rank.status.state);
    if (rank.status.step >= 0) row.step = rank.status.step;
    if (rank.progress) {
      if (rank.progress->last_beat_wall_ms != 0) row.last_beat_ms = rank.progress->last_beat_wall_ms;
      row.metrics = rank.progress->metrics;
    }
    // The signal that killed it says more than the code that came with it.
    if (rank.status.exit_signal) row.exit = RunSnapshot::RankExit{std::nullopt, rank.status.exit_signal};
    else if (rank.status.exit_code) row.exit = RunSnapshot::RankExit{rank.status.exit_code, std::nullopt};
  });
  return rows;
}

namespace {

/// One rank in metrics.jsonl.
struct MetricsSample {
  int rank;
  int64_t step;
  const contract::BeatMetrics* metrics;  ///< the rank's progress (outlives the line's making)
};

json metrics_entry(const MetricsSample& sample) {
  json rank = {{"rank", sample.rank}, {"step", sample.step}};
  contract::write_beat_metrics(*sample.metrics, rank, contract::kInMetricsLine);
  return rank;
}

json spread(std::vector<double> values) {
  if (values.empty()) return nullptr;
  std::sort(values.begin(), values.end());
  return {{"min", values.front()}, {"median", values[values.size() / 2]}, {"max", values.back()}};
}

}  // namespace

std::optional<json> RankProgressTable::metrics_line(const supervisor::Supervisor& supervisor,
                                                    size_t detail_ranks) const {
  std::vector<MetricsSample> samples;
  for_each_rank(supervisor, [&](const RankRow& rank) {
    if (!rank.progress || rank.status.step < 0) return;
    samples.push_back({static_cast<int>(rank.index), rank.status.step, &rank.progress->metrics});
  });
  if (samples.empty()) return std::nullopt;
  json line = json::object();
  if (supervisor.ranks().size() <= detail_ranks) {  // by world size: one format for the whole run
    json ranks = json::array();
    for (const MetricsSample& sample : samples) ranks.push_back(metrics_entry(sample));
    line["ranks"] = std::move(ranks);
    return line;
  }
  std::vector<double> steps;
  for (const MetricsSample& sample : samples) steps.push_back(static_cast<double>(sample.step));
  json step_spread = spread(steps);
  line["ranks_reporting"] = samples.size();
  line["step"] = step_spread;
  // Each metric's spread over the ranks that reported it (a metric none reported is left out).
  double median_ms = 0;  // of the step times, for the outliers
  for (const contract::BeatMetric& metric : contract::kBeatMetrics) {
    if ((metric.shown & contract::kInMetricsLine) == 0) continue;
    std::vector<double> values;
    for (const MetricsSample& sample : samples) {
      if (const std::optional<double>& value = sample.metrics->*metric.field) values.push_back(*value);
    }
    if (values.empty()) continue;
    std::sort(values.begin(), values.end());
    if (metric.field == &contract::BeatMetrics::step_ms) median_ms = values[values.size() / 2];
    line[std::string(metric.key)] = spread(std::move(values));
  }
  double newest = step_spread["max"].get<double>();
  std::vector<MetricsSample> outliers;
  for (const MetricsSample& sample : samples) {
    bool lagging = static_cast<double>(sample.step) < newest - 1;
    bool slow = median_ms > 0 && sample.metrics->step_ms && *sample.metrics->step_ms > 1.5 * median_ms;
    if (lagging || slow) outliers.push_back(sample);
  }
  std::sort(outliers.begin(), outliers.end(), [](const MetricsSample& a, const MetricsSample& b) {
    return std::make_pair(a.step, -a.metrics->step_ms.value_or(0)) <
           std::make_pair(b.step, -b.metrics->step_ms.value_or(0));
  });
  line["outliers_total"] = outliers.size();
  json shown = json::array();
  for (size_t i = 0; i < outliers.size() && i < detail_ranks; ++i) shown.push_back(metrics_entry(outliers[i]));
  line["outliers"] = std::move(shown);
  return line;
}

ConsoleStatus RankProgressTable::console_status(const supervisor::Supervisor& supervisor) const {
  ConsoleStatus status;
  status.state = supervisor::to_string(supervisor.state());
  status.generation = std::max(0, supervisor.generation());
  status.world_size = supervisor.current_plan().world_size;
  for_each_rank(supervisor, [&](const RankRow& rank) {
    if (rank.status.state == supervisor::RankState::running) ++status.workers_running;
    if (rank.status.step <= status.step) return;
    status.step = rank.status.step;  // the newest step, with the loss of the rank that reached it
    if (rank.progress && rank.progress->metrics.loss) {
      status.loss = *rank.progress->metrics.loss;
      status.has_loss = true;
    }
  });
  return status;
}

std::vector<metrics::RankTaskMetrics> RankProgressTable::task_metric_rows(
    const supervisor::Supervisor& supervisor, const metrics::StragglerDetector& stragglers) const {
  std::vector<metrics::RankTaskMetrics> rows;
  rows.reserve(supervisor.ranks().size());
  for_each_rank(supervisor, [&](const RankRow& rank) {
    if (!rank.slot) return;
    metrics::RankTaskMetrics& row = rows.emplace_back();
    row.rank = rank.slot->rank;
    row.host = rank.slot->host;
    row.step = rank.status.step;
    if (const RankProgress* progress = rank.progress) {
      const contract::BeatMetrics& beat = progress->metrics;
      row.metrics = beat;
      if (beat.samples && beat.step_ms && *beat.step_ms > 0) row.samples_per_second = *beat.samples * 1000.0 / *beat.step_ms;
    }
    row.straggler_score = stragglers.score(static_cast<int>(rank.index));
  });
  return rows;
}

void RankProgressTable::add_straggler_samples(const supervisor::Supervisor& supervisor,
                                              metrics::StragglerDetector& stragglers) const {
  for_each_rank(supervisor, [&](const RankRow& rank) {
    if (!rank.progress || rank.status.step < 0 || !rank.progress->metrics.step_ms) return;
    // The rank's own work: its step less its wait in collectives (see stragglers.h).
    const contract::BeatMetrics& beat = rank.progress->metrics;
    double work_ms = std::max(0.0, *beat.step_ms - beat.comm_ms.value_or(0.0));
    stragglers.add(static_cast<int>(rank.index), rank.status.step, work_ms);
  });
}

double RankProgressTable::fastest_step_ms(const supervisor::Supervisor& supervisor) const {
  double fastest = 0;
  for_each_rank(supervisor, [&](const RankRow& rank) {
    std::optional<double> step_ms = rank.progress ? rank.progress->metrics.step_ms : std::nullopt;
    if (!step_ms || *step_ms <= 0) return;
    fastest = fastest == 0 ? *step_ms : std::min(fastest, *step_ms);
  });
  return fastest;
}

}  // namespace dtrain::run
