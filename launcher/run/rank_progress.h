#pragma once
// RankProgressTable: what each rank's beats said beyond its step (which the supervisor keeps),
// and the one builder of every per-rank view of a run — state.json's rows, metrics.jsonl's
// line, the console's status and the Prometheus ranks. Each view walks the same rows
// (for_each_rank: the plan's slot, the supervisor's status and the beat's progress of one rank).
//
// A per-rank metric that workers beat is a row of contract::kBeatMetrics
// (worker/contract/beat_metrics.h): the table is read from the beat, kept and shown by walking
// that table, so adding one touches nothing here.

#include <cstdint>
#include <optional>
#include <vector>

#include <nlohmann/json.hpp>

#include "launcher/metrics/stragglers.h"
#include "launcher/metrics/task_metrics.h"
#include "launcher/proto/worker_messages.h"
#include "launcher/run/console.h"
#include "launcher/runlog/run_snapshot.h"
#include "launcher/supervisor/supervisor.h"
#include "worker/contract/beat_metrics.h"

namespace dtrain::run {

/// One rank's progress as its worker reported it (the current generation's only).
struct RankProgress {
  int64_t last_beat_wall_ms = 0;
  contract::BeatMetrics metrics;  ///< each metric's newest value (a beat without one keeps the last)
  bool speaks_protocol = false;            ///< said hello or beat: it can hear ckpt.request
};

/// One rank as every view sees it. `slot` is null past the plan's ranks and `progress` past the
/// table's (a generation's statuses and progress are made at different moments).
struct RankRow {
  size_t index = 0;
  const supervisor::RankStatus& status;
  const plan::RankSlot* slot = nullptr;
  const RankProgress* progress = nullptr;
};

class RankProgressTable {
 public:
  /// A new generation's ranks, none heard from yet.
  void reset(size_t ranks) { ranks_.assign(ranks, RankProgress{}); }
  /// A rank replaced in place: its new worker starts from nothing.
  void reset_rank(int rank);
  /// The worker said hello (of the current generation).
  void hello(int rank);
  /// The worker's beat (of the current generation), received at `wall_ms`.
  void beat(int rank, const proto::WorkerBeat& beat, int64_t wall_ms);
  const RankProgress* find(int rank) const {
    return rank >= 0 && static_cast<size_t>(rank) < ranks_.size() ? &ranks_[static_cast<size_t>(rank)] : nullptr;
  }

  /// Calls `visit(const RankRow&)` for each of the supervisor's ranks, in rank order.
  template <class Visit>
  void for_each_rank(const supervisor::Supervisor& supervisor, Visit&& visit) const {
    const std::vector<supervisor::RankStatus>& statuses = supervisor.ranks();
    const plan::RankPlan& plan = supervisor.current_plan();
    for (size_t i = 0; i < statuses.size(); ++i) {
      visit(RankRow{i, statuses[i], i < plan.ranks.size() ? &plan.ranks[i] : nullptr,
                    i < ranks_.size() ? &ranks_[i] : nullptr});
    }
  }

  // ---- the views
  /// state.json's "ranks" (the ranks of the plan).
  std::vector<RunSnapshot::Rank> state_rows(const supervisor::Supervisor& supervisor) const;
  /// metrics.jsonl's rank line (without "ts" and "gen"): each rank's step, loss and step time up
  /// to `detail_ranks` ranks in the world; beyond, the spread and the ranks that stand out.
  /// Nullopt while no rank has stepped.
  std::optional<nlohmann::json> metrics_line(const supervisor::Supervisor& supervisor, size_t detail_ranks) const;
  /// The console's live line.
  ConsoleStatus console_status(const supervisor::Supervisor& supervisor) const;
  /// The Prometheus exposition's ranks (the ranks of the plan), with their straggler scores.
  std::vector<metrics::RankTaskMetrics> task_metric_rows(const supervisor::Supervisor& supervisor,
                                                         const metrics::StragglerDetector& stragglers) const;
  /// Each stepping rank's own work per step (its step less its wait in collectives), for the
  /// straggler detector.
  void add_straggler_samples(const supervisor::Supervisor& supervisor, metrics::StragglerDetector& stragglers) const;
  /// The fastest step time any rank reported; 0 when none did.
  double fastest_step_ms(const supervisor::Supervisor& supervisor) const;

 private:
  std::vector<RankProgress> ranks_;
};

}  // namespace dtrain::run
