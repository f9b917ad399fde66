#pragma once
// The run's history as a timeline: generations, what happened on which host and when (failure,
// detection, stop, re-plan, spawn, rendezvous, first step, checkpoints), and each rank's process
// spans. Built once from the events; the HTML page and timeline.json both draw from it.

#include <cstdint>
#include <string>
#include <vector>

#include "launcher/report/run_record.h"

namespace dtrain::report {

/// What a mark on the timeline stands for; `mark_kind_name` gives the stable name the page
/// uses (data-kind="crash", ...), which tests and people's scripts may rely on.
enum class MarkKind {
  crash,       ///< a worker exited non-zero or by a signal, and that was the failure
  hang,        ///< a worker's step stood still (drawn where the silence began)
  host_lost,   ///< a host went silent or its connection closed (drawn where the silence began)
  failure,     ///< any other failure kind (launch timeout, protocol, ...)
  detected,    ///< the supervisor's failure.detected
  stop,        ///< a host confirmed its workers of a generation are gone (resources.released)
  replan,      ///< a new plan after a failure (plan.generation of a later generation)
  spawn,       ///< a generation's workers started on a host
  rendezvous,  ///< every rank's communicator is up (comm.ready)
  first_step,  ///< the new generation stepped (recovery.completed)
  checkpoint,  ///< a checkpoint committed
  drill,       ///< a drill injected a fault
  finished,    ///< the run ended
};
const char* mark_kind_name(MarkKind kind);

struct Mark {
  int64_t wall_ms = 0;
  MarkKind kind = MarkKind::failure;
  /// The host lane; empty for the run's own lane (supervisor decisions, rendezvous...).
  std::string host;
  int generation = -1;
  int rank = -1;
  std::string label;  ///< one line for a tooltip, e.g. "rank 1 killed by SIGKILL"
};

/// One generation: from its spawn to the next generation's plan (or the run's end).
struct GenerationSpan {
  int generation = 0;
  int64_t start_ms = 0, end_ms = 0;
  int world_size = 0;
  std::vector<std::string> hosts;  ///< hosts that ran its ranks
};

/// One worker process: worker.started to worker.exit (or the end of the timeline).
struct RankSpan {
  int generation = 0;
  int rank = 0;
  std::string host;
  int64_t start_ms = 0, end_ms = 0;
  std::string end;  ///< "exit 0", "SIGKILL", "running" (no exit seen)
};

/// One recovery: recovery.started to recovery.completed, with its phases in ms.
struct RecoverySpan {
  int generation = 0;  ///< the generation it started
  int64_t start_ms = 0, end_ms = 0;
  std::string cause;   ///< "rank 1 on localhost: killed by SIGKILL"
  std::string action;  ///< restart, replace, shrink
  int64_t steps_lost = 0;
  std::vector<std::pair<std::string, int64_t>> phases;  ///< in the order they happen
};

struct Timeline {
  int64_t start_ms = 0, end_ms = 0;
  std::vector<std::string> hosts;  ///< every host, lane order: the spec's, then spares and others
  std::vector<GenerationSpan> generations;
  std::vector<Mark> marks;  ///< time order
  std::vector<RankSpan> ranks;
  std::vector<RecoverySpan> recoveries;
};

Timeline build_timeline(const RunRecord& record);

/// The recovery phases in the order they happen; unknown *_ms fields of a newer supervisor
/// follow in key order; total_ms is not a phase.
std::vector<std::pair<std::string, int64_t>> recovery_phases(const nlohmann::json& phases);

/// Lanes to draw when there are more hosts than fit: hosts where a failure, detection or drill
/// happened first, then the others in lane order, `max_lanes` - 1 of them at most when some
/// are left over (the last lane then stands for all the rest). Empty result: `hosts` fits.
struct LaneChoice {
  std::vector<std::string> shown;
  size_t grouped = 0;  ///< hosts drawn together in the last lane
};
LaneChoice choose_lanes(const Timeline& timeline, size_t max_lanes);

}  // namespace dtrain::report
