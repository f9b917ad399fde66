#pragma once
// The driver's task metrics (internal to launcher/run; driver_metrics.cpp): what it keeps between
// ticks for goodput, stragglers and the Prometheus exposition. The values come from the events
// the driver records (observe) and from its per-rank progress (RunDriver::update_task_metrics).

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "launcher/metrics/goodput.h"
#include "launcher/metrics/metrics_endpoint.h"
#include "launcher/metrics/stragglers.h"

namespace dtrain::run {

struct TaskMetricsState {
  explicit TaskMetricsState(double straggler_threshold) : stragglers({straggler_threshold}) {}

  /// Every event the driver records, as it records it: goodput, restarts, checkpoints and
  /// generation boundaries follow from them.
  void observe(const nlohmann::json& event, int64_t wall_ms, int64_t monotonic_ms);

  metrics::GoodputTracker goodput;
  metrics::StragglerDetector stragglers;
  std::unique_ptr<metrics::MetricsEndpoint> endpoint;  ///< metrics.listen, when set

  int generation = -1;                 ///< whose ranks the straggler windows hold
  int64_t generation_resume_step = -1;  ///< plan.generation's resume_step
  int64_t generation_spawned_ms = 0;    ///< monotonic, at generation.spawned
  bool generation_stepped = false;      ///< generation.stepped recorded for it
  std::map<std::string, int> restarts_by_kind;
  int64_t checkpoints = 0, checkpoint_bytes = 0;
  std::optional<int64_t> last_checkpoint_step, last_checkpoint_bytes;
  std::optional<double> last_checkpoint_seconds;
  std::map<std::string, double> last_recovery_phase_seconds;
  int64_t last_sample_ms = 0;     ///< straggler samples taken (monotonic)
  int64_t last_write_ms = -1;     ///< metrics.prom written (monotonic); -1: never
};

}  // namespace dtrain::run
