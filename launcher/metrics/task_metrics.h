#pragma once
// What a run exposes to Prometheus: a snapshot of its task metrics that the driver fills on its
// loop (cheap: numbers copied out of its own state), rendered to the text format off the loop.
//
// Labels stay bounded: per host always; per rank only while the world has at most
// kPerRankLabelLimit ranks (a 16,384-rank run would be 16,384 series per family every scrape).

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "launcher/metrics/goodput.h"
#include "launcher/metrics/prometheus_text.h"
#include "worker/contract/beat_metrics.h"

namespace dtrain::metrics {

/// Per-rank series (dtrain_rank_*) only up to this many ranks; beyond, per-host summaries only.
inline constexpr int kPerRankLabelLimit = 64;

struct RankTaskMetrics {
  int rank = 0;
  std::string host;
  int64_t step = -1;  ///< -1: no step yet
  contract::BeatMetrics metrics;  ///< its newest beat's, as beaten (milliseconds; exported in seconds)
  std::optional<double> samples_per_second;
  std::optional<double> straggler_score;
};

/// Host resources, as the agents report them (issue 14 item 1). HOOK: the driver fills these
/// when its agent beats carry host metrics; absent fields are simply not exported.
struct HostResourceMetrics {
  std::string host;
  std::optional<double> cpu_utilisation;       ///< 0..1 of all CPUs
  std::optional<double> memory_used_bytes, memory_total_bytes;
  struct Gpu {
    int index = 0;
    std::optional<double> utilisation, memory_used_bytes, power_watts, temperature_celsius, ecc_errors;
  };
  std::vector<Gpu> gpus;
};

/// One health check of one host, as its newest host.health said it (spec health).
struct HostHealthCheck {
  std::string host;
  std::string check;
  int severity = 0;  ///< 0 ok, 1 warn, 2 fail
};

struct TaskSnapshot {
  std::string run_id;
  std::string name;
  std::string state;  ///< supervisor state: launching, running, recovering, ...
  int generation = 0;
  int world_size = 0;
  int64_t global_batch = 0;  ///< samples per step, for samples/s when ranks do not say
  std::map<std::string, int> restarts_by_kind;  ///< failure kind → recoveries it caused
  int64_t checkpoints_committed = 0;
  int64_t checkpoint_bytes_total = 0;
  std::optional<int64_t> last_checkpoint_step, last_checkpoint_bytes;
  std::optional<double> last_checkpoint_seconds;
  std::map<std::string, double> last_recovery_phase_seconds;  ///< detect, stop, replan, ...
  std::vector<RankTaskMetrics> ranks;
  std::vector<HostResourceMetrics> hosts;
  std::vector<HostHealthCheck> health;
  std::vector<std::string> quarantined;  ///< hosts this run quarantined
  double straggler_threshold = 0.75;
  int stragglers = 0;
  std::optional<Goodput> goodput;
};

/// The exposition (PrometheusText) of a snapshot: dtrain_* families, see README "Metrics".
std::string render_prometheus(const TaskSnapshot& snapshot);

}  // namespace dtrain::metrics
