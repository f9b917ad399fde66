#pragma once
// The measured step time of a job from its earlier runs (issue 30, `dtrain plan --advise`'s
// expected time to the target): the registry knows which runs a job had, where their run
// directories are and how many GPUs (or slots) each held; each run's own step time is read from
// its run directory by the caller (metrics.jsonl's step_ms, through the report's reader), as the
// registry parses no run file but events.jsonl. The job's step time is the median of those runs'
// step times, of runs at the same world size when there are some.

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "launcher/base/result.h"
#include "launcher/registry/registry_db.h"

namespace dtrain::registry {

/// An earlier run of a job that trained (its first generation spawned).
struct EarlierRun {
  std::string run_id;
  std::string run_dir;
  std::string state;       ///< the registry's: succeeded, failed, stopped, running, ...
  int world_size = 0;      ///< units (GPUs or slots) its first generation held; 0 when unknown
  int64_t submitted_ms = 0;
};

/// Earlier runs of the job named `job_name` that started training, newest first, at most `limit`.
Result<std::vector<EarlierRun>> earlier_runs(RegistryDb& db, const std::string& job_name, int limit);

/// A run directory's step time in ms (the median of its ranks' step_ms), none when it has none.
using StepTimeOfRun = std::function<std::optional<double>(const std::string& run_dir)>;

struct JobStepTime {
  struct Measured {
    EarlierRun run;
    double step_ms = 0;
  };
  std::vector<Measured> runs;           ///< the runs the median is over, newest first
  std::optional<double> median_step_ms; ///< none: no earlier run with a step time
  bool same_world_size = false;         ///< the runs are at the asked world size
  /// Where the figure comes from, in words: "median of 2 earlier runs of 'llm' at world size 16
  /// (llm-a 500ms, llm-b 700ms; each the median step_ms of its metrics.jsonl)"; when there is
  /// none, why and how to get one.
  std::string source;
};

/// The job's measured step time: from its newest `limit` earlier runs that have a step time,
/// those at `world_size` when any are (else every world size, said in the source).
Result<JobStepTime> job_step_time(RegistryDb& db, const std::string& job_name, int world_size,
                                  const StepTimeOfRun& step_time_of_run, int limit = 10);

}  // namespace dtrain::registry
