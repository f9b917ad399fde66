#pragma once
// plan-<gen>.json read back: the rank plan a generation ran with, as `dtrain status` shows it.
// The file is plan::to_json's output (launcher/plan/rank_plan.h); runlog may not link the plan
// module (docs/architecture.md §2), so this parses the JSON itself and keeps only what status prints. A
// hand-edited or truncated file is an error value, never a crash.

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "launcher/base/result.h"
#include "launcher/runlog/run_directory.h"

namespace dtrain {

/// One generation's plan: sizes, batch arithmetic, and where each rank runs.
struct PlanRecord {
  /// One rank's coordinates.
  struct Rank {
    int rank = 0;
    int dp = 0, pp = 0, tp = 0;
  };
  /// A host that runs ranks, with its ranks in plan order.
  struct Host {
    std::string name;
    bool spare = false;
    std::vector<Rank> ranks;
  };

  int generation = 0;
  int world_size = 0;
  int data = 1, pipeline = 1, tensor = 1;
  int global_batch = 0;   ///< 0 when the spec sets none
  int micro_batch = 0;
  int grad_accum = 1;
  std::vector<Host> hosts;
  std::vector<std::string> without;      ///< hosts left out (lost or excluded)
  std::vector<std::string> spares_used;  ///< spares that replaced them
  /// The object as read from the file, for `dtrain status --json`.
  nlohmann::json json;
};

/// Parses a plan::to_json object. Errors (infra) name the missing or mistyped field, prefixed
/// by `where` (the file's path).
/// Takes `plan` by value: the record keeps it (move it in; a 16,384-rank plan is megabytes).
Result<PlanRecord> parse_plan_record(nlohmann::json plan, int generation, const std::string& where);

/// Whether a plan read back keeps its JSON (PlanRecord::json, for `dtrain status --json`).
/// Without it a plan as dtrain writes it is read on a faster parser (simdjson; same record, and
/// any doubt goes the nlohmann way, which words the error).
enum class PlanJson { keep, drop };

/// Reads run.plan_path(generation). A missing file is an infra error that says so ("no
/// plan-<gen>.json").
Result<PlanRecord> read_plan_record(const RunDirectory& run, int generation, PlanJson keep = PlanJson::keep);

/// A plan file's text read as read_plan_record does (`where` names it in errors).
Result<PlanRecord> parse_plan_text(const std::string& text, int generation, const std::string& where,
                                   PlanJson keep = PlanJson::keep);

/// Largest plan-<gen>.json read back (by status, resume and report): a plan is about 100 bytes
/// per rank, 50 MiB for half a million ranks.
inline constexpr size_t kMaxPlanFileBytes = size_t{256} << 20;

/// A plan file's text: read_regular_file without following a link, at most kMaxPlanFileBytes.
Result<std::string> read_plan_text(const std::string& path);

/// True when both plans put the same ranks with the same coordinates on the same hosts, with
/// the same sizes, batch, exclusions and spares.
bool same_layout(const PlanRecord& a, const PlanRecord& b);

/// One line saying how `current` differs from `first` (normally generation 0):
///   "shrunk from 6 to 4 ranks at gen 2: host dt-h2 excluded; data 3 → 2; grad_accum 2 → 3"
///   "re-planned at gen 1, still 6 ranks: host dt-h2 excluded; spare dt-h4 in use; dt-h4 takes
///    dt-h2's place: ranks 2–3 at (tp,pp,dp) (0,0,1) (1,0,1)"
/// in the plan-change vocabulary (launcher/base/plan_change.h), which plan.changed shares.
/// `since_generation` is the first generation of the current layout; when `replans` > 1 the
/// line says "over N re-plans (current since gen G)" instead of "at gen G". "" when the
/// layouts are the same.
std::string plan_change_text(const PlanRecord& first, const PlanRecord& current, int since_generation,
                             int replans = 1);

/// plan_change_text for `current` against plan-0.json, counting re-plans over the plan files
/// of generations 0..current.generation that exist (missing ones are skipped). "" when
/// generation 0's plan is missing or equal to `current`.
std::string plan_history_text(const RunDirectory& run, const PlanRecord& current);

}  // namespace dtrain
