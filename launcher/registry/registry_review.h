#pragma once
// The registry rows `dtrain review` needs beyond history, usage, capacity and audit: every
// allocation and failure of a set of runs (the runs of the review's period), each row whole,
// so the review can say which hosts a run held and which failures came from where.

#include <string>
#include <vector>

#include "launcher/base/result.h"
#include "launcher/registry/registry_db.h"

namespace dtrain::registry {

/// Every allocation of the runs `run_ids`, by run, then start. Errors name the registry file.
Result<std::vector<AllocationRow>> allocations_of_runs(RegistryDb& db, const std::vector<std::string>& run_ids);

/// Every failure of the runs `run_ids`, oldest detected first. Errors name the registry file.
Result<std::vector<FailureRow>> failures_of_runs(RegistryDb& db, const std::vector<std::string>& run_ids);

}  // namespace dtrain::registry
