#include "launcher/metrics/task_metrics.h"

#include <algorithm>
#include <array>

#include "launcher/metrics/step_split.h"

namespace dtrain::metrics {

namespace {

using Type = PrometheusText::Type;

double median(std::vector<double> values) {
  auto middle = values.begin() + static_cast<std::ptrdiff_t>(values.size() / 2);
  std::nth_element(values.begin(), middle, values.end());
  return *middle;
}

/// Every series carries the run's id: node_exporter's textfile collector merges the files of
/// every run on a host, and two runs' series must not collide.
class Exporter {
 public:
  explicit Exporter(std::string run_id) : run_id_(std::move(run_id)) {}
  void family(std::string_view name, Type type, std::string_view help) { text_.family(name, type, help); }
  void sample(std::string_view name, double value, Labels labels = {}) {
    labels.insert(labels.begin(), {"run", run_id_});
    text_.sample(name, value, labels);
  }
  void optional(std::string_view name, const std::optional<double>& value, Labels labels = {}) {
    if (value) sample(name, *value, std::move(labels));
  }
  std::string text() const { return text_.text(); }

 private:
  std::string run_id_;
  PrometheusText text_;
};

void export_run(Exporter& out, const TaskSnapshot& s) {
  out.family("dtrain_run_info", Type::gauge, "The run: always 1; its name and state as labels");
  out.sample("dtrain_run_info", 1, {{"name", s.name}, {"state", s.state}});
  out.family("dtrain_generation", Type::gauge, "The current generation (0, then one more per restart)");
  out.sample("dtrain_generation", s.generation);
  out.family("dtrain_world_size", Type::gauge, "Ranks in the current generation");
  out.sample("dtrain_world_size", s.world_size);
  int restarts = 0;
  for (const auto& [kind, count] : s.restarts_by_kind) restarts += count;
  out.family("dtrain_restarts_total", Type::counter, "Recoveries started (every kind)");
  out.sample("dtrain_restarts_total", restarts);
  out.family("dtrain_restarts_by_kind_total", Type::counter, "Recoveries started, by the kind of failure that caused them");
  for (const auto& [kind, count] : s.restarts_by_kind) out.sample("dtrain_restarts_by_kind_total", count, {{"kind", kind}});

  out.family("dtrain_checkpoints_total", Type::counter, "Checkpoints committed (every shard and the manifest)");
  out.sample("dtrain_checkpoints_total", static_cast<double>(s.checkpoints_committed));
  out.family("dtrain_checkpoint_bytes_total", Type::counter, "Bytes of the checkpoints committed");
  out.sample("dtrain_checkpoint_bytes_total", static_cast<double>(s.checkpoint_bytes_total));
  out.family("dtrain_checkpoint_last_step", Type::gauge, "Step of the newest committed checkpoint");
  if (s.last_checkpoint_step) out.sample("dtrain_checkpoint_last_step", static_cast<double>(*s.last_checkpoint_step));
  out.family("dtrain_checkpoint_last_bytes", Type::gauge, "Size of the newest committed checkpoint");
  if (s.last_checkpoint_bytes) out.sample("dtrain_checkpoint_last_bytes", static_cast<double>(*s.last_checkpoint_bytes));
  out.family("dtrain_checkpoint_last_save_seconds", Type::gauge, "How long the newest checkpoint took to save");
  out.optional("dtrain_checkpoint_last_save_seconds", s.last_checkpoint_seconds);

  out.family("dtrain_recovery_phase_seconds", Type::gauge,
             "The last recovery's phases: detect, stop, replan, spawn, rendezvous, first_step, total");
  for (const auto& [phase, seconds] : s.last_recovery_phase_seconds) {
    out.sample("dtrain_recovery_phase_seconds", seconds, {{"phase", phase}});
  }

  if (s.goodput) {
    const Goodput& g = *s.goodput;
    out.family("dtrain_goodput_ratio", Type::gauge, "Productive training time / wall time since submit");
    out.sample("dtrain_goodput_ratio", g.ratio());
    out.family("dtrain_goodput_wall_seconds", Type::gauge, "Wall time since the run was submitted");
    out.sample("dtrain_goodput_wall_seconds", g.wall_seconds);
    out.family("dtrain_goodput_productive_seconds", Type::gauge, "Time that trained the model (not redone, not stalled)");
    out.sample("dtrain_goodput_productive_seconds", g.productive_seconds);
    out.family("dtrain_goodput_lost_seconds", Type::gauge,
               "Time that did not train, by reason: launch, detection, restart, redone_steps, checkpoint_stall, shutdown");
    for (auto [reason, seconds] : {std::pair{"launch", g.launch_seconds}, {"detection", g.detection_seconds},
                                   {"restart", g.restart_seconds}, {"redone_steps", g.redone_steps_seconds},
                                   {"checkpoint_stall", g.checkpoint_stall_seconds}, {"shutdown", g.shutdown_seconds}}) {
      out.sample("dtrain_goodput_lost_seconds", seconds, {{"reason", reason}});
    }
    out.family("dtrain_goodput_redone_steps", Type::gauge, "Steps trained again after resuming from an older checkpoint");
    out.sample("dtrain_goodput_redone_steps", static_cast<double>(g.redone_steps));
  }
  out.family("dtrain_stragglers", Type::gauge, "Ranks whose straggler score is below the threshold now");
  out.sample("dtrain_stragglers", s.stragglers);
  out.family("dtrain_straggler_threshold", Type::gauge, "metrics.straggler_threshold");
  out.sample("dtrain_straggler_threshold", s.straggler_threshold);
}

void export_progress(Exporter& out, const TaskSnapshot& s) {
  // The run as a whole: the newest step, the median step time, the newest rank's loss.
  int64_t step = -1;
  std::optional<double> loss;
  std::vector<double> step_times;
  std::optional<double> samples_per_second;
  for (const RankTaskMetrics& rank : s.ranks) {
    if (rank.step > step) {
      step = rank.step;
      loss = rank.metrics.loss;
    }
    if (rank.metrics.step_ms) step_times.push_back(*rank.metrics.step_ms / 1000.0);
    if (rank.samples_per_second) samples_per_second = std::max(samples_per_second.value_or(0), *rank.samples_per_second);
  }
  out.family("dtrain_step", Type::gauge, "The newest step any rank reported");
  if (step >= 0) out.sample("dtrain_step", static_cast<double>(step));
  out.family("dtrain_step_seconds", Type::gauge, "Median over ranks of their latest step time");
  out.family("dtrain_samples_per_second", Type::gauge, "Training throughput: samples per step / step time");
  if (!step_times.empty()) {
    double typical = median(step_times);
    out.sample("dtrain_step_seconds", typical);
    if (!samples_per_second && s.global_batch > 0 && typical > 0) {
      samples_per_second = static_cast<double>(s.global_batch) / typical;
    }
  }
  out.optional("dtrain_samples_per_second", samples_per_second);
  out.family("dtrain_loss", Type::gauge, "Loss reported with the newest step");
  out.optional("dtrain_loss", loss);
}

/// A beat metric in Prometheus' base units: seconds, not milliseconds.
double base_units(const contract::BeatMetric& metric, double value) {
  return metric.unit == contract::MetricUnit::milliseconds ? value / 1000.0 : value;
}

std::string host_family(const contract::BeatMetric& metric) {
  return "dtrain_host_" + std::string(metric.prometheus) +
         (metric.host_summary == contract::HostSummary::max ? "_max" : "_mean");
}

void export_hosts(Exporter& out, const TaskSnapshot& s) {
  struct Summary {
    double sum = 0, max = 0;
    int count = 0;
  };
  struct HostSummary {
    int ranks = 0;
    int64_t min_step = -1;
    std::optional<double> min_score;
    std::array<Summary, contract::kBeatMetrics.size()> metrics{};
  };
  std::map<std::string, HostSummary> hosts;
  for (const RankTaskMetrics& rank : s.ranks) {
    HostSummary& host = hosts[rank.host];
    host.min_step = host.ranks++ == 0 ? rank.step : std::min(host.min_step, rank.step);
    if (rank.straggler_score) host.min_score = std::min(host.min_score.value_or(1), *rank.straggler_score);
    for (size_t i = 0; i < contract::kBeatMetrics.size(); ++i) {
      const std::optional<double>& value = rank.metrics.*contract::kBeatMetrics[i].field;
      if (!value) continue;
      Summary& summary = host.metrics[i];
      summary.max = summary.count++ == 0 ? *value : std::max(summary.max, *value);
      summary.sum += *value;
    }
  }
  out.family("dtrain_host_ranks", Type::gauge, "Ranks placed on the host in the current generation");
  out.family("dtrain_host_step_min", Type::gauge, "The slowest-progressing rank's step on the host");
  for (const contract::BeatMetric& metric : contract::kBeatMetrics) {
    if (metric.prometheus.empty() || metric.host_summary == contract::HostSummary::none) continue;
    out.family(host_family(metric), Type::gauge, metric.host_help);
  }
  out.family("dtrain_host_straggler_score_min", Type::gauge, "The lowest straggler score of the host's ranks (1: fastest)");
  for (const auto& [name, host] : hosts) {
    Labels labels = {{"host", name}};
    out.sample("dtrain_host_ranks", host.ranks, labels);
    if (host.min_step >= 0) out.sample("dtrain_host_step_min", static_cast<double>(host.min_step), labels);
    for (size_t i = 0; i < contract::kBeatMetrics.size(); ++i) {
      const contract::BeatMetric& metric = contract::kBeatMetrics[i];
      const Summary& summary = host.metrics[i];
      if (metric.prometheus.empty() || metric.host_summary == contract::HostSummary::none || summary.count == 0) continue;
      double value = metric.host_summary == contract::HostSummary::max ? summary.max : summary.sum / summary.count;
      out.sample(host_family(metric), base_units(metric, value), labels);
    }
    out.optional("dtrain_host_straggler_score_min", host.min_score, labels);
  }
}

void export_health(Exporter& out, const TaskSnapshot& s) {
  if (s.health.empty() && s.quarantined.empty()) return;
  out.family("dtrain_host_health", Type::gauge,
             "The host's newest health check by name (spec health): 0 ok, 1 warn, 2 fail (a failed host is left out)");
  for (const HostHealthCheck& check : s.health) {
    out.sample("dtrain_host_health", check.severity, {{"host", check.host}, {"check", check.check}});
  }
  out.family("dtrain_host_quarantined", Type::gauge, "1: this run quarantined the host (kept out of later runs)");
  for (const std::string& host : s.quarantined) out.sample("dtrain_host_quarantined", 1, {{"host", host}});
}

void export_ranks(Exporter& out, const TaskSnapshot& s) {
  if (static_cast<int>(s.ranks.size()) > kPerRankLabelLimit) return;
  out.family("dtrain_rank_step", Type::gauge, "The rank's latest step");
  for (const contract::BeatMetric& metric : contract::kBeatMetrics) {
    if (!metric.prometheus.empty()) {
      out.family("dtrain_rank_" + std::string(metric.prometheus), Type::gauge, metric.rank_help);
    }
  }
  out.family("dtrain_rank_straggler_score", Type::gauge,
             "Fastest rank's median step work time / this rank's (1: fastest; below the threshold: straggler)");
  for (const RankTaskMetrics& rank : s.ranks) {
    Labels labels = {{"host", rank.host}, {"rank", std::to_string(rank.rank)}};
    if (rank.step >= 0) out.sample("dtrain_rank_step", static_cast<double>(rank.step), labels);
    for (const contract::BeatMetric& metric : contract::kBeatMetrics) {
      const std::optional<double>& value = rank.metrics.*metric.field;
      if (!metric.prometheus.empty() && value) {
        out.sample("dtrain_rank_" + std::string(metric.prometheus), base_units(metric, *value), labels);
      }
    }
    out.optional("dtrain_rank_straggler_score", rank.straggler_score, labels);
  }
}

/// The step split (step_split.h) over the ranks' latest beats: each rank's compute, the mean of
/// each part and the bottleneck as a state set (1 for the part named, 0 for the others), so an
/// alert reads `dtrain_step_bottleneck{part="data"} == 1`.
void export_step_split(Exporter& out, const TaskSnapshot& s) {
  StepSplitBuilder builder;
  for (const RankTaskMetrics& rank : s.ranks) builder.add(rank.rank, rank.metrics);
  StepSplit split = builder.build();
  out.family("dtrain_step_part_seconds", Type::gauge,
             "Mean over ranks of their latest step's time by part: data (waiting for input), communication (in collectives), compute (the rest)");
  out.family("dtrain_step_bottleneck", Type::gauge, "1 for the part of the step that costs most rank time (data, communication or compute), 0 for the others");
  if (split.bottleneck) {
    for (StepPart part : {StepPart::data, StepPart::communication, StepPart::compute}) {
      Labels labels = {{"part", std::string(to_string(part))}};
      out.sample("dtrain_step_part_seconds", split.mean.of(part) / 1000.0, labels);
      out.sample("dtrain_step_bottleneck", part == *split.bottleneck ? 1 : 0, labels);
    }
  }
  if (static_cast<int>(s.ranks.size()) > kPerRankLabelLimit) return;
  out.family("dtrain_rank_compute_seconds", Type::gauge,
             "The rank's latest step time less its time waiting for input and in collectives");
  if (!split.bottleneck) return;
  for (const RankTaskMetrics& rank : s.ranks) {
    auto row = std::find_if(split.ranks.begin(), split.ranks.end(), [&](const RankStepSplit& r) { return r.rank == rank.rank; });
    if (row == split.ranks.end()) continue;
    out.sample("dtrain_rank_compute_seconds", row->parts.compute_ms / 1000.0, {{"host", rank.host}, {"rank", std::to_string(rank.rank)}});
  }
}

void export_resources(Exporter& out, const TaskSnapshot& s) {
  out.family("dtrain_host_cpu_utilisation_ratio", Type::gauge, "Busy share of the host's CPUs (0..1)");
  out.family("dtrain_host_memory_used_bytes", Type::gauge, "Memory in use on the host");
  out.family("dtrain_host_memory_total_bytes", Type::gauge, "Memory of the host");
  out.family("dtrain_gpu_utilisation_ratio", Type::gauge, "GPU busy share (0..1)");
  out.family("dtrain_gpu_memory_used_bytes", Type::gauge, "GPU memory in use");
  out.family("dtrain_gpu_power_watts", Type::gauge, "GPU power draw");
  out.family("dtrain_gpu_temperature_celsius", Type::gauge, "GPU temperature");
  out.family("dtrain_gpu_ecc_errors_total", Type::counter, "GPU ECC errors (uncorrected, volatile)");
  for (const HostResourceMetrics& host : s.hosts) {
    Labels labels = {{"host", host.host}};
    out.optional("dtrain_host_cpu_utilisation_ratio", host.cpu_utilisation, labels);
    out.optional("dtrain_host_memory_used_bytes", host.memory_used_bytes, labels);
    out.optional("dtrain_host_memory_total_bytes", host.memory_total_bytes, labels);
    for (const HostResourceMetrics::Gpu& gpu : host.gpus) {
      Labels gpu_labels = {{"host", host.host}, {"gpu", std::to_string(gpu.index)}};
      out.optional("dtrain_gpu_utilisation_ratio", gpu.utilisation, gpu_labels);
      out.optional("dtrain_gpu_memory_used_bytes", gpu.memory_used_bytes, gpu_labels);
      out.optional("dtrain_gpu_power_watts", gpu.power_watts, gpu_labels);
      out.optional("dtrain_gpu_temperature_celsius", gpu.temperature_celsius, gpu_labels);
      out.optional("dtrain_gpu_ecc_errors_total", gpu.ecc_errors, gpu_labels);
    }
  }
}

}  // namespace

std::string render_prometheus(const TaskSnapshot& snapshot) {
  Exporter out(snapshot.run_id);
  export_run(out, snapshot);
  export_progress(out, snapshot);
  export_hosts(out, snapshot);
  export_health(out, snapshot);
  export_ranks(out, snapshot);
  export_step_split(out, snapshot);
  export_resources(out, snapshot);
  return out.text();
}

}  // namespace dtrain::metrics
