#pragma once
// SnapshotWriter: what the driver shows of a run while it runs — state.json (for `dtrain
// status`), metrics.jsonl and the console's live status. It owns their pacing: each is built by
// walking every rank, too slow to build on every wakeup of the loop at thousands of ranks. What
// it reads (the supervisor, rank progress, the agent links, the router, metrics) it holds by
// reference; what it builds goes to the recorder, which writes it off the loop.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "launcher/base/clock.h"
#include "launcher/run/agent_link.h"
#include "launcher/run/frame_router.h"
#include "launcher/run/metrics_exporter.h"
#include "launcher/run/rank_progress.h"
#include "launcher/run/run_recorder.h"
#include "launcher/runlog/run_directory.h"
#include "launcher/supervisor/supervisor.h"

namespace dtrain::run {

/// When the run began, for state.json and the run's elapsed time.
struct RunTimes {
  int64_t submitted_wall_ms = 0;  ///< `dtrain submit` (a resumed run keeps its first submit's)
  std::optional<int64_t> resumed_wall_ms;  ///< when `dtrain resume` started this supervisor
};

class SnapshotWriter {
 public:
  /// Everything referenced must outlive the writer. `hostname`: this machine's, for state.json;
  /// `detached`: the supervisor runs in the background (state.json says so).
  SnapshotWriter(const spec::JobSpec& spec, const RunDirectory& run, const supervisor::Supervisor& supervisor,
                 const RankProgressTable& progress, const AgentLinks& links, const FrameRouter& router,
                 const MetricsExporter& metrics, const RunTimes& times, RunRecorder& recorder, const Clock& clock,
                 std::string hostname, bool detached);

  /// Builds state.json's snapshot and hands it to the recorder: at once when forced or when
  /// the run's state changed, else at most every state_write_spacing_ms_. `finished`: the end
  /// the supervisor decided, once it has.
  void write_state(bool force, const std::optional<supervisor::FinishRun>& finished);
  /// One metrics.jsonl line of the ranks' progress: every 5 s while workers report, or now
  /// when forced (at the end).
  void write_metrics(bool force);
  /// The console's live status, at most every 200 ms (none on a quiet console).
  void show_status();

 private:
  static constexpr int64_t kStateWriteSpacingMs = 500;
  static constexpr size_t kMetricsDetailRanks = 64;

  const spec::JobSpec& spec_;
  const RunDirectory& run_;
  const supervisor::Supervisor& supervisor_;
  const RankProgressTable& progress_;
  const AgentLinks& links_;
  const FrameRouter& router_;
  const MetricsExporter& metrics_;
  const RunTimes& times_;
  RunRecorder& recorder_;
  const Clock& clock_;
  const std::string hostname_;
  const bool detached_;
  int64_t last_state_write_ms_ = 0;
  int64_t state_write_spacing_ms_ = kStateWriteSpacingMs;
  std::string last_state_name_;
  int64_t last_metrics_ms_ = 0;
  int64_t last_status_ms_ = 0;
};

}  // namespace dtrain::run
