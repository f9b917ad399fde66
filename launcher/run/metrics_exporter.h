#pragma once
// MetricsExporter: the run's task metrics while it runs — the first step of each generation
// (generation.stepped), straggler scores from every rank's step times (straggler.detected /
// .cleared), goodput, and the Prometheus exposition (<run dir>/metrics.prom, the node_exporter
// textfile and the loopback /metrics endpoint) every metrics.interval and at the end. Its inputs
// are the events the driver records (observe) and the ranks' progress (RankProgressTable).
// Files are written by the recorder's thread, the endpoint serves from its own: the loop only
// copies numbers.

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "launcher/metrics/goodput.h"
#include "launcher/metrics/metrics_endpoint.h"
#include "launcher/metrics/stragglers.h"
#include "launcher/runlog/event_log.h"
#include "launcher/proto/agent_messages.h"
#include "launcher/run/rank_progress.h"
#include "launcher/run/run_recorder.h"
#include "launcher/runlog/run_directory.h"
#include "launcher/spec/job_spec.h"
#include "launcher/supervisor/supervisor.h"

namespace dtrain::run {

/// What the exporter keeps between ticks.
struct TaskMetricsState {
  explicit TaskMetricsState(double straggler_threshold) : stragglers({straggler_threshold}) {}

  /// Every event the driver records, as it records it: goodput, restarts, checkpoints and
  /// generation boundaries follow from them.
  void observe(const LoggedEvent& event, int64_t wall_ms, int64_t monotonic_ms);

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

/// The newest resources of each host (FrameRouter::host_resources).
using HostResourcesByName = std::map<std::string, proto::HostResources>;

class MetricsExporter {
 public:
  /// Everything referenced must outlive the exporter.
  MetricsExporter(const spec::JobSpec& spec, const RunDirectory& run, RunRecorder& recorder, const Clock& clock);

  /// Every event the driver records, as it records it: goodput, restarts, checkpoints and
  /// generation boundaries follow from them. The first call also reads what events.jsonl held
  /// before (run.submitted; a resumed run's whole history).
  void observe(const nlohmann::json& event);
  /// Once per loop turn: starts the endpoint (metrics.listen; tried once), records
  /// generation.stepped and straggler changes through `record`, then write(false).
  void update(const supervisor::Supervisor& supervisor, const RankProgressTable& progress,
              const HostResourcesByName& hosts, const std::function<void(nlohmann::json)>& record);
  /// metrics.prom, the textfile and the endpoint's text: every metrics.interval, or now when forced.
  void write(bool force, const supervisor::Supervisor& supervisor, const RankProgressTable& progress,
             const HostResourcesByName& hosts);

  /// For state.json: the stragglers now and the goodput so far.
  const metrics::StragglerDetector& stragglers() const { return state_.stragglers; }
  const metrics::GoodputTracker& goodput() const { return state_.goodput; }

 private:
  const spec::JobSpec& spec_;
  const RunDirectory& run_;
  RunRecorder& recorder_;
  const Clock& clock_;
  TaskMetricsState state_;
  bool seeded_ = false;  ///< the events written before this driver were observed
};

}  // namespace dtrain::run
