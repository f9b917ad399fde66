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
  if (beat.loss) progress.loss = *beat.loss;
  if (beat.step_ms) progress.step_ms = *beat.step_ms;
  if (beat.comm_ms) progress.comm_ms = *beat.comm_ms;
  if (beat.data_ms) progress.data_ms = *beat.data_ms;
  if (beat.samples) progress.samples = *beat.samples;
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
      row.loss = rank.progress->loss;
      row.step_ms = rank.progress->step_ms;
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
  std::optional<double> step_ms, loss;
};

json metrics_entry(const MetricsSample& sample) {
  json rank = {{"rank", sample.rank}, {"step", sample.step}};
  if (sample.loss) rank["loss"] = *sample.loss;
  if (sample.step_ms) rank["step_ms"] = *sample.step_ms;
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
    samples.push_back({static_cast<int>(rank.index), rank.status.step, rank.progress->step_ms, rank.progress->loss});
  });
  if (samples.empty()) return std::nullopt;
  json line = json::object();
  if (supervisor.ranks().size() <= detail_ranks) {  // by world size: one format for the whole run
    json ranks = json::array();
    for (const MetricsSample& sample : samples) ranks.push_back(metrics_entry(sample));
    line["ranks"] = std::move(ranks);
    return line;
  }
  std::vector<double> steps, step_times, losses;
  for (const MetricsSample& sample : samples) {
    steps.push_back(static_cast<double>(sample.step));
    if (sample.step_ms) step_times.push_back(*sample.step_ms);
    if (sample.loss) losses.push_back(*sample.loss);
  }
  json step_spread = spread(steps);
  json time_spread = spread(step_times);
  line["ranks_reporting"] = samples.size();
  line["step"] = step_spread;
  line["step_ms"] = time_spread;
  line["loss"] = spread(losses);
  double newest = step_spread["max"].get<double>();
  double median_ms = time_spread.is_null() ? 0.0 : time_spread["median"].get<double>();
  std::vector<MetricsSample> outliers;
  for (const MetricsSample& sample : samples) {
    bool lagging = static_cast<double>(sample.step) < newest - 1;
    bool slow = median_ms > 0 && sample.step_ms && *sample.step_ms > 1.5 * median_ms;
    if (lagging || slow) outliers.push_back(sample);
  }
  std::sort(outliers.begin(), outliers.end(), [](const MetricsSample& a, const MetricsSample& b) {
    return std::make_pair(a.step, -a.step_ms.value_or(0)) < std::make_pair(b.step, -b.step_ms.value_or(0));
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
    if (rank.progress && rank.progress->loss) {
      status.loss = *rank.progress->loss;
      status.has_loss = true;
    }
  });
  return status;
}

std::vector<metrics::RankTaskMetrics> RankProgressTable::task_metric_rows(
    const supervisor::Supervisor& supervisor, const metrics::StragglerDetector& stragglers) const {
  std::vector<metrics::RankTaskMetrics> rows;
  rows.reserve(supervisor.ranks().size());
  auto seconds = [](const std::optional<double>& ms) -> std::optional<double> {
    return ms ? std::optional<double>(*ms / 1000.0) : std::nullopt;
  };
  for_each_rank(supervisor, [&](const RankRow& rank) {
    if (!rank.slot) return;
    metrics::RankTaskMetrics& row = rows.emplace_back();
    row.rank = rank.slot->rank;
    row.host = rank.slot->host;
    row.step = rank.status.step;
    if (const RankProgress* progress = rank.progress) {
      row.step_seconds = seconds(progress->step_ms);
      row.comm_seconds = seconds(progress->comm_ms);
      row.data_seconds = seconds(progress->data_ms);
      row.loss = progress->loss;
      if (progress->samples && progress->step_ms && *progress->step_ms > 0) {
        row.samples_per_second = static_cast<double>(*progress->samples) * 1000.0 / *progress->step_ms;
      }
    }
    row.straggler_score = stragglers.score(static_cast<int>(rank.index));
  });
  return rows;
}

void RankProgressTable::add_straggler_samples(const supervisor::Supervisor& supervisor,
                                              metrics::StragglerDetector& stragglers) const {
  for_each_rank(supervisor, [&](const RankRow& rank) {
    if (!rank.progress || rank.status.step < 0 || !rank.progress->step_ms) return;
    // The rank's own work: its step less its wait in collectives (see stragglers.h).
    double work_ms = std::max(0.0, *rank.progress->step_ms - rank.progress->comm_ms.value_or(0.0));
    stragglers.add(static_cast<int>(rank.index), rank.status.step, work_ms);
  });
}

double RankProgressTable::fastest_step_ms(const supervisor::Supervisor& supervisor) const {
  double fastest = 0;
  for_each_rank(supervisor, [&](const RankRow& rank) {
    if (!rank.progress || !rank.progress->step_ms || *rank.progress->step_ms <= 0) return;
    fastest = fastest == 0 ? *rank.progress->step_ms : std::min(fastest, *rank.progress->step_ms);
  });
  return fastest;
}

}  // namespace dtrain::run
