// MetricsExporter (metrics_exporter.h): goodput and the counters from the events recorded,
// generation.stepped and stragglers from the ranks' progress, and the Prometheus exposition.

#include "launcher/run/metrics_exporter.h"

#include <algorithm>

#include "launcher/events/event.h"
#include "launcher/runlog/event_log.h"
#include "launcher/metrics/task_metrics.h"
#include "launcher/base/json_fields.h"

namespace dtrain::run {

using nlohmann::json;

void TaskMetricsState::observe(const LoggedEvent& logged, int64_t wall_ms, int64_t monotonic_ms) {
  using namespace events;
  goodput.add(logged, wall_ms);
  std::visit(Overloaded{
      [&](const PlanGeneration& plan) { generation_resume_step = plan.resume_step; },
      [&](const GenerationSpawned&) { generation_spawned_ms = monotonic_ms; },
      [&](const RecoveryStarted& started) {
        ++restarts_by_kind[to_string(started.cause.kind)];
      },
      [&](const CheckpointCommitted& committed) {
        ++checkpoints;
        checkpoint_bytes += committed.bytes;
        last_checkpoint_bytes = committed.bytes;
        last_checkpoint_step = committed.step;
        last_checkpoint_seconds = committed.seconds;
      },
      [&](const RecoveryCompleted& completed) {
        last_recovery_phase_seconds.clear();
        for (const auto& [phase, value] : completed.phases.items()) {
          if (!value.is_number()) continue;
          std::string label = phase.size() > 3 && phase.ends_with("_ms") ? phase.substr(0, phase.size() - 3) : phase;
          last_recovery_phase_seconds[label] = value.get<double>() / 1000.0;
        }
      },
      [](const auto&) {},
  }, logged.event);
}

MetricsExporter::MetricsExporter(const spec::JobSpec& spec, const RunDirectory& run, RunRecorder& recorder,
                                 const Clock& clock)
    : spec_(spec), run_(run), recorder_(recorder), clock_(clock), state_(spec.metrics.straggler_threshold) {}

void MetricsExporter::observe(const json& event) {
  if (!seeded_) {
    // run.submitted (and, for a resumed run, its whole history) was written before this driver
    // existed: goodput counts from the submit.
    seeded_ = true;
    if (Result<std::vector<LoggedEvent>> earlier = read_logged_events(run_.events_path())) {
      for (const LoggedEvent& old : *earlier) {
        if (std::optional<int64_t> at = old.wall_ms()) state_.observe(old, *at, clock_.monotonic_ms());
      }
    }
  }
  // The driver records what it built itself: a struct's to_json() always reads back.
  if (Result<LoggedEvent> typed = to_logged_event(event)) state_.observe(*typed, clock_.wall_ms(), clock_.monotonic_ms());
}

void MetricsExporter::update(const supervisor::Supervisor& supervisor, const RankProgressTable& progress,
                             const HostResourcesByName& hosts, const std::function<void(json)>& record) {
  TaskMetricsState& state = state_;
  if (!state.endpoint && !spec_.metrics.listen.empty() && state.last_write_ms < 0) {
    // Tried once: a port in use costs the run its endpoint, never the run.
    if (auto endpoint = metrics::MetricsEndpoint::start(spec_.metrics.listen)) {
      state.endpoint = std::move(endpoint).value();
      recorder_.log().info("metrics: serving GET /metrics on {}", spec_.metrics.listen);
    } else {
      recorder_.log().warn("{}", endpoint.error().message);
      recorder_.console_line("warning: " + endpoint.error().message);
    }
  }
  const int generation = supervisor.generation();
  const auto& ranks = supervisor.ranks();
  const plan::RankPlan& plan = supervisor.current_plan();
  int64_t now = clock_.monotonic_ms();
  if (generation != state.generation) {
    state.generation = generation;
    state.generation_stepped = false;
    state.stragglers.reset(static_cast<int>(ranks.size()));
  }
  if (generation >= 0 && !state.generation_stepped) {
    for (const supervisor::RankStatus& rank : ranks) {
      if (rank.step < 0 || rank.step <= state.generation_resume_step) continue;
      state.generation_stepped = true;
      record(events::GenerationStepped{generation, rank.step, std::max<int64_t>(0, now - state.generation_spawned_ms)}
                 .to_json());
      break;
    }
  }
  // Step times are sampled once a second: beats arrive at the heartbeat interval anyway, and a
  // pass over every rank is O(ranks).
  if (state.generation_stepped && now - state.last_sample_ms >= 1000) {
    state.last_sample_ms = now;
    progress.add_straggler_samples(supervisor, state.stragglers);
    for (const metrics::StragglerChange& change : state.stragglers.evaluate()) {
      std::string host = static_cast<size_t>(change.rank) < plan.ranks.size() ? plan.ranks[change.rank].host : "";
      events::StragglerScore score{generation, host, change.rank, change.score, change.median_ms,
                                   change.fastest_median_ms};
      if (change.detected) {
        recorder_.log().warn("straggler: rank {} on {}: median {:.1f} ms of work per step, the fastest rank {:.1f} ms (score {:.2f})",
                   change.rank, host, change.median_ms, change.fastest_median_ms, change.score);
      }
      record(change.detected ? events::StragglerDetected{score}.to_json() : events::StragglerCleared{score}.to_json());
    }
  }
  write(false, supervisor, progress, hosts);
}

void MetricsExporter::write(bool force, const supervisor::Supervisor& supervisor, const RankProgressTable& progress,
                            const HostResourcesByName& hosts) {
  TaskMetricsState& state = state_;
  int64_t now = clock_.monotonic_ms();
  if (!force && state.last_write_ms >= 0 && now - state.last_write_ms < spec_.metrics.interval.count()) return;
  state.last_write_ms = now;

  metrics::TaskSnapshot snapshot;
  const plan::RankPlan& plan = supervisor.current_plan();
  snapshot.run_id = run_.id();
  snapshot.name = spec_.name;
  snapshot.state = supervisor::to_string(supervisor.state());
  snapshot.generation = std::max(0, supervisor.generation());
  snapshot.world_size = plan.world_size;
  snapshot.global_batch = spec_.batch.global;
  snapshot.restarts_by_kind = state.restarts_by_kind;
  snapshot.checkpoints_committed = state.checkpoints;
  snapshot.checkpoint_bytes_total = state.checkpoint_bytes;
  snapshot.last_checkpoint_step = state.last_checkpoint_step;
  snapshot.last_checkpoint_bytes = state.last_checkpoint_bytes;
  snapshot.last_checkpoint_seconds = state.last_checkpoint_seconds;
  snapshot.last_recovery_phase_seconds = state.last_recovery_phase_seconds;
  snapshot.straggler_threshold = spec_.metrics.straggler_threshold;
  snapshot.stragglers = state.stragglers.stragglers();
  snapshot.goodput = state.goodput.at(clock_.wall_ms());
  snapshot.ranks = progress.task_metric_rows(supervisor, state.stragglers);
  for (const auto& [host, resources] : hosts) {
    metrics::HostResourceMetrics out;
    out.host = host;
    if (resources.cpu_percent) out.cpu_utilisation = *resources.cpu_percent / 100.0;
    constexpr double kMiB = 1024.0 * 1024.0;
    if (resources.memory_used_mb) out.memory_used_bytes = static_cast<double>(*resources.memory_used_mb) * kMiB;
    if (resources.memory_total_mb) out.memory_total_bytes = static_cast<double>(*resources.memory_total_mb) * kMiB;
    for (const proto::GpuResources& gpu : resources.gpus) {
      metrics::HostResourceMetrics::Gpu g;
      g.index = gpu.index;
      if (gpu.utilization_percent) g.utilisation = *gpu.utilization_percent / 100.0;
      if (gpu.memory_used_mb) g.memory_used_bytes = static_cast<double>(*gpu.memory_used_mb) * kMiB;
      g.power_watts = gpu.power_w;
      if (gpu.temperature_c) g.temperature_celsius = static_cast<double>(*gpu.temperature_c);
      if (gpu.ecc_uncorrected) g.ecc_errors = static_cast<double>(*gpu.ecc_uncorrected);
      out.gpus.push_back(std::move(g));
    }
    snapshot.hosts.push_back(std::move(out));
  }

  for (const auto& [host, health] : supervisor.host_health()) {
    for (const events::HealthCheckResult& check : health.checks) {
      int severity = check.verdict == events::HealthCheckResult::kFail   ? 2
                     : check.verdict == events::HealthCheckResult::kWarn ? 1
                                                                         : 0;
      snapshot.health.push_back({host, check.name, severity});
    }
  }
  snapshot.quarantined = supervisor.quarantined_hosts();
  std::string text = metrics::render_prometheus(snapshot);
  if (state.endpoint) state.endpoint->publish(text);
  if (!spec_.metrics.textfile_dir.empty()) {
    // The name ends in .prom only once complete (the temporary file does not), so the collector
    // never reads half of one. 0644, unlike the run directory's files: node_exporter runs as its
    // own user, and the file holds what a scrape would publish anyway (no secrets).
    recorder_.write_file(spec_.metrics.textfile_dir + "/dtrain_" + run_.id() + ".prom", text,
                         Durability::kUnsynced, 0644);
  }
  recorder_.write_file(run_.path() + "/metrics.prom", std::move(text));
}

}  // namespace dtrain::run
