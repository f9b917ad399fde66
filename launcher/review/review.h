#pragma once
// `dtrain review`: the review pack a platform team signs off on (issue 30), as one typed struct.
// The builder (review_builder.h) fills it from the run registry, the drill history and the run
// directories; the HTML page (review_html.h) and `--json` (to_json below) are two views of the
// same struct, so the page and the JSON cannot disagree. Four groups, as the founding document
// asks: current state, validation, decision, operations; `sources` says where each section's
// figures come from, `generated` when, and `scope` what they apply to.
//
// Numbers that may be unknown are -1 ("not known"), never a made-up zero; the JSON writes them
// as they are so that a reader can tell.

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "launcher/base/result.h"
#include "launcher/registry/registry_queries.h"

namespace dtrain::review {

/// The JSON format this dtrain writes ("version").
inline constexpr int kReviewVersion = 1;
/// "Keep at least one month of pilot data before deciding": days between the first and the
/// last run in scope that count as that month.
inline constexpr int kPilotDays = 30;

/// What the review applies to.
struct Scope {
  std::string since;  ///< ISO-8601 UTC, inclusive (runs submitted at or after)
  std::string until;  ///< exclusive
  int64_t since_ms = 0;
  int64_t until_ms = 0;
  std::string tenant;              ///< empty: every tenant
  std::vector<std::string> hosts;  ///< empty: every host; else runs that held one of them
};

// ---- current state

struct HostUse {
  std::string host;
  std::string resource;      ///< "gpu" or "slot"
  int units = 0;             ///< the most it held in one allocation (the registry has no inventory)
  double unit_hours = 0;     ///< held by the runs in scope
  double busy_fraction = 0;  ///< every run's hold over capacity × hours in the period
  int runs = 0;
  int failures = 0;
  int root_cause_failures = 0;
};

struct DayBusy {
  std::string day;  ///< "YYYY-MM-DD"
  double busy_unit_hours = 0;
  double capacity_unit_hours = 0;
  double busy_fraction = 0;
};

struct FailureCauseCount {
  std::string kind;  ///< failure kind ("worker.exit", "host.lost", ...)
  int count = 0;     ///< root-cause failures of that kind
  std::vector<std::string> hosts;  ///< where they came from, "gpu03 ×2"
};

struct CurrentState {
  int runs = 0;
  int tenants = 0;
  int hosts = 0;
  int gpus = 0;   ///< sum over the hosts used of their units, GPU hosts
  int slots = 0;  ///< worker slots on hosts without GPUs
  double gpu_hours = 0;
  double slot_hours = 0;
  double capacity_unit_hours = 0;
  double busy_fraction = 0;  ///< busy / capacity unit-hours of the hosts used, over the period
  std::map<std::string, int> runs_by_state;
  std::vector<HostUse> hosts_used;
  std::vector<DayBusy> days;
  std::vector<FailureCauseCount> top_failure_causes;
};

// ---- validation

struct DrillGrade {
  std::string at;  ///< when it finished
  std::string drill_id;
  std::string run_id;
  std::string tenant;
  std::string mode;     ///< "live" or "spec"
  std::string verdict;  ///< "pass", "fail" or "error"
  std::vector<std::string> faults;  ///< "kill-rank:1 pass"
  std::vector<std::string> missed;
  int leftover_processes = 0;
  std::string from;  ///< "drills.jsonl" or "<run>/events.jsonl"
};

struct FailureSample {
  std::string at;
  std::string run_id;
  std::string tenant;
  int generation = -1;
  std::string kind;
  std::string host;
  int rank = -1;
  bool root_cause = false;  ///< the first failure detected in its generation
  std::string detail;
  std::vector<std::string> sample;  ///< traceback or log tail, newest line last
  std::string sample_from;          ///< which file or event it came from; empty: none found
};

struct RecoveryPhase {
  std::string name;  ///< "detect", "stop", "replan", "spawn", "rendezvous", "first_step", ...
  int64_t ms = 0;
};

struct RecoveryRecord {
  std::string at;
  std::string run_id;
  std::string tenant;
  int generation = -1;  ///< the generation it recovered into
  std::string action;   ///< restart, replace, shrink, resume, in-place
  std::string cause_kind;
  std::string cause_host;
  int64_t total_ms = 0;  ///< the sum of its phases
  int64_t steps_lost = 0;
  std::vector<RecoveryPhase> phases;
  std::string fallback;  ///< why an in-place recovery fell back; empty: it did not
};

struct CheckpointFigures {
  std::string run_id;
  std::string tenant;
  int checkpoints = 0;           ///< distinct steps committed
  int rejected = 0;
  int64_t interval_steps = -1;   ///< median between consecutive checkpoints
  int64_t interval_ms = -1;
  int64_t bytes = -1;            ///< median size of one checkpoint (every shard)
  double save_seconds = -1;      ///< median of the slowest shard's save
  int64_t restore_ms = -1;       ///< median of the recoveries' first-step phase (load + first step)
};

struct ReleaseRecord {
  std::string at;
  std::string run_id;
  std::string tenant;
  int generation = -1;
  std::string host;
  int killed = 0;
  int64_t remaining = 0;  ///< processes still there after the release: must be 0
  int64_t ms = 0;
  bool unconfirmed = false;  ///< resources.unconfirmed: the host never confirmed
  std::string detail;
};

struct Validation {
  std::vector<DrillGrade> drills;
  std::vector<FailureSample> failures;
  std::vector<RecoveryRecord> recoveries;
  std::vector<CheckpointFigures> checkpoints;
  std::vector<ReleaseRecord> releases;
  int leftovers = 0;  ///< releases with processes remaining, unconfirmed hosts, drill leftovers
};

// ---- decision

/// "met", "missed" or "not tested" (the period holds no evidence either way).
inline constexpr const char* kMet = "met";
inline constexpr const char* kMissed = "missed";
inline constexpr const char* kNotTested = "not tested";

struct ObjectiveResult {
  std::string objective;  ///< "max_recovery", "max_lost", "mode", "target_duration"
  std::string wanted;     ///< "60s", "50 steps", "in-place"
  std::string status;     ///< kMet, kMissed, kNotTested
  std::string evidence;
};

struct RunObjectives {
  std::string run_id;
  std::string tenant;
  std::string name;
  bool intent_given = false;
  std::vector<ObjectiveResult> objectives;
};

struct PilotData {
  std::string first_run;  ///< ISO-8601; empty without runs
  std::string last_run;
  double days = 0;  ///< between the first and the last run submitted in scope
  int required_days = kPilotDays;
  bool enough = false;
};

/// "go", "not yet" or "stop".
inline constexpr const char* kGo = "go";
inline constexpr const char* kNotYet = "not yet";
inline constexpr const char* kStop = "stop";

struct TenantVerdict {
  std::string tenant;
  std::string verdict;
  std::vector<std::string> reasons;
  PilotData data;
  int runs = 0;
  int runs_with_intent = 0;
  int drills_passed = 0;
  int drills_failed = 0;  ///< fail or error
  int objectives_missed = 0;
  int leftovers = 0;
};

struct Decision {
  std::vector<RunObjectives> runs;
  PilotData data;
  std::vector<TenantVerdict> tenants;
  std::vector<std::string> rules;  ///< the go / not yet / stop rules, as the page states them
};

// ---- operations

struct OwnerRow {
  std::string owner;  ///< tenant ("" : none) or user
  int64_t runs = 0;
  double gpu_hours = 0;
  double slot_hours = 0;
};

struct TrendPoint {
  std::string week;  ///< the first day of a 7-day bucket from the period's start
  double busy_fraction = 0;
};

struct QuarantinedHost {
  std::string host;
  std::string reason;
  std::string since;
  std::string until;
  std::string source;  ///< the run that quarantined it, or "manual"
  bool active = false;  ///< at the time the review was generated
  std::string released;  ///< when, by whom and why; empty: not released
};

struct AuditEntry {
  std::string at;
  std::string category;  ///< "over quota", "quarantine", "release", "rebuild"
  std::string actor;
  std::string action;
  std::string run_id;
  std::string target;
  std::string result;
};

struct Operations {
  std::vector<OwnerRow> tenants;
  std::vector<OwnerRow> users;
  std::vector<TrendPoint> capacity_trend;
  std::string trend;  ///< "rising", "falling", "flat" or "not enough data", with the figures
  std::vector<registry::StandingOutHost> standing_out;  ///< hosts whose failure rate stands out
  std::vector<QuarantinedHost> quarantined;
  std::vector<AuditEntry> audit;
  int audit_rows_in_period = 0;  ///< every row, permission-relevant or not
};

struct Review {
  int version = kReviewVersion;
  std::string generated;  ///< ISO-8601 UTC
  std::string dtrain_version;
  Scope scope;
  std::string registry;       ///< the registry file read
  std::string drill_history;  ///< drills.jsonl read
  bool no_runs = true;
  std::string summary;  ///< one line: runs, tenants, verdicts; or that the period holds no runs
  /// Section id → where its figures come from ("registry.db: allocations of 12 runs").
  std::map<std::string, std::string> sources;
  int64_t skipped_lines = 0;          ///< damaged lines of events.jsonl and drills.jsonl, left out
  std::vector<std::string> problems;  ///< files that could not be read, one line each
  CurrentState current;
  Validation validation;
  Decision decision;
  Operations operations;
};

nlohmann::json to_json(const Review& review);
/// Reads what to_json wrote (tests, tools). A field of the wrong type is an error naming it,
/// never an exception; a missing field keeps its default.
Result<Review> review_from_json(const nlohmann::json& json);

/// The section ids of the page and of `sources`, in page order, with their group and title.
struct SectionName {
  const char* id;
  const char* group;
  const char* title;
};
inline constexpr SectionName kSections[] = {
    {"hosts", "current state", "Hosts, GPUs and busy %"},
    {"runs", "current state", "Runs and tenants"},
    {"failure-causes", "current state", "Top failure causes and their hosts"},
    {"drills", "validation", "Drills and their grades"},
    {"failures", "validation", "Failures, root causes and samples"},
    {"recoveries", "validation", "Recoveries and their phases"},
    {"checkpoints", "validation", "Checkpoint interval, size, save and restore"},
    {"releases", "validation", "Resources released after every retry"},
    {"objectives", "decision", "Intent objectives met or missed"},
    {"pilot-data", "decision", "A month of pilot data"},
    {"verdicts", "decision", "Go / not yet / stop per tenant"},
    {"owners", "operations", "Owners: tenants and users"},
    {"capacity", "operations", "Capacity hint and its trend"},
    {"quarantine", "operations", "Quarantined hosts"},
    {"audit", "operations", "Audit of permission-relevant actions"},
};

}  // namespace dtrain::review
