#pragma once
// One generation of a run (docs/architecture.md §1): its ranks as the supervisor knows them and the
// moments and steps its recovery, launch deadline, crash-loop rule and hang watch measure from.
// A new generation is a new value made by make_generation(); nothing is reset field by field.

#include <cstdint>
#include <map>
#include <vector>

#include "launcher/spec/job_spec.h"
#include "launcher/supervisor/hang_detector.h"
#include "launcher/supervisor/supervisor_types.h"

namespace dtrain::supervisor {

struct Generation {
  int number = -1;                ///< -1 before the first
  std::vector<RankStatus> ranks;  ///< by rank, as in the plan it runs
  int started = 0;                ///< ranks running: reported `started`, or carried over in place
  int comm_ready = 0;             ///< ranks whose communicator is up
  int exited = 0;                 ///< ranks that exited 0 while it ran (a cheap test before a full scan)
  int64_t started_ms = 0;         ///< monotonic: launched, or continued in place
  int64_t spawned_ms = 0;         ///< monotonic; 0 until GenerationSpawned
  int64_t start_step = -1;        ///< the step it starts from: progress is a step past it
  int64_t start_checkpoint = -1;  ///< the newest committed checkpoint when it started
  HangDetector hangs;
};

/// Generation `number` of `world_size` ranks starting at `now_ms`: every rank starting, except
/// the survivors `carried` over from the previous generation in place (rank → pid), which run
/// already; their step is unknown until they beat again, so they are not watched before that.
Generation make_generation(int number, size_t world_size, int64_t now_ms, int64_t start_step,
                           int64_t start_checkpoint, const spec::JobSpec& spec,
                           const std::map<int, int>& carried = {});

}  // namespace dtrain::supervisor
