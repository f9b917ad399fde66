#pragma once
// `dtrain registry rebuild`: the registry re-created from the run directories, which stay the
// source of truth (also for runs made before the registry existed).

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "launcher/base/result.h"
#include "launcher/registry/registry_db.h"

namespace dtrain::registry {

/// What one run directory adds to the registry.
struct RunRecords {
  RunRow run;
  std::vector<AllocationRow> allocations;
  std::vector<FailureRow> failures;
  std::vector<HostEventRow> host_events;
};

/// The rows for the run in `run_dir` from its events (oldest first; read_events order) and its
/// state.json (`state`, an empty object when unreadable). Generations: each one holds the hosts
/// of its plan.generation event from that event until the next generation's plan, the run's
/// run.finished, or (for one host) that host's host.lost; a host holds
/// as many units as it started workers in that generation (else world_size / hosts). A run whose
/// log ends without run.finished: open allocations when `still_running`, else they end at the
/// last event and the run's state is "supervisor gone". Hosts whose host.facts list GPUs hold
/// GPUs; others hold worker slots.
RunRecords records_from_events(const std::string& run_id, const std::string& run_dir,
                               const std::vector<nlohmann::json>& events, const nlohmann::json& state,
                               bool still_running);

struct RebuildSummary {
  int runs = 0;
  int allocations = 0;
  int skipped_lines = 0;          ///< damaged events.jsonl lines, skipped
  int audit_rows_kept = 0;        ///< copied from the registry being replaced
  std::vector<std::string> warnings;  ///< runs that could not be read, lines skipped, audit lost
};

/// Re-creates `registry_file` from every run directory under `runs_root`: built in a temporary
/// file beside it and renamed over it, so a reader sees the old registry or the new one. The
/// audit table, which no run directory holds, is copied from the old registry when it is readable.
Result<RebuildSummary> rebuild_registry(const std::string& registry_file, const std::string& runs_root);

}  // namespace dtrain::registry
