#pragma once
// Builds the Review (review.h) from the run registry (runs, allocations, failures, usage,
// capacity, quarantine, audit), the drill history ($DTRAIN_HOME/drills.jsonl) and the run
// directories of the runs in scope (run_evidence.h). No clock of its own: the caller passes
// now_ms, where allocations still held end and against which quarantines are active.

#include <cstdint>
#include <string>

#include "launcher/base/result.h"
#include "launcher/registry/registry_db.h"
#include "launcher/review/review.h"

namespace dtrain::review {

struct ReviewRequest {
  Scope scope;  ///< since_ms and until_ms set (until after since)
  int64_t now_ms = 0;
  std::string drill_history_path;
};

/// The review of the runs submitted in [since, until) (of the tenant, on the hosts, when given).
/// Errors only when the registry cannot be read (they name the file); files of runs are
/// problems in the review, and a period without runs is a review that says so.
Result<Review> build_review(registry::RegistryDb& db, const ReviewRequest& request);

// ---- parts (review_registry_parts.cpp), for build_review

/// Busy % per host and day, the trend in 7-day buckets and the hosts whose failures stand out,
/// for the hosts in `review.current.hosts_used`.
Status fill_capacity(registry::RegistryDb& db, const ReviewRequest& request, Review& review);
/// Owners (usage by tenant and user), quarantined hosts and the permission-relevant audit.
Status fill_operations(registry::RegistryDb& db, const ReviewRequest& request, Review& review);

}  // namespace dtrain::review
