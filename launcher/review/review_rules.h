#pragma once
// The review's judgements as pure functions (no files, no clock), so that each rule is stated
// once, on one screen, and unit-tested: a month of pilot data or not, a run's intent objectives
// met or missed, and the go / not yet / stop line of a tenant. man/dtrain-review.1 states the
// same rules in words; `rules()` is how the page states them.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "launcher/review/review.h"
#include "launcher/spec/job_spec.h"

namespace dtrain::review {

/// The month-of-data rule: days between the earliest and the latest of `submitted_ms` (runs in
/// scope); enough when they are at least `required_days` apart. No runs: 0 days, not enough.
PilotData pilot_data(const std::vector<int64_t>& submitted_ms, int required_days = kPilotDays);

/// What one run did that its intent is graded against.
struct RunOutcome {
  std::vector<RecoveryRecord> recoveries;
  /// First generation to the end; none while unknown (never started).
  std::optional<int64_t> duration_ms;
  bool finished = false;              ///< run.finished seen (else still running or its supervisor died)
  std::optional<double> step_ms;      ///< time per step, where the checkpoints tell it
};

/// Each objective the intent states, met, missed or not tested, with the evidence:
///  - max_recovery: the longest recovery (sum of its phases) at most max_recovery; no recovery:
///    not tested;
///  - max_lost (steps): the most steps one recovery lost at most that; (time): steps lost × the
///    time per step; no recovery, or no step time: not tested;
///  - mode in-place: every recovery replaced in place; mode restart: any recovery is acceptable
///    (met once one happened); none: not tested;
///  - target_duration: a finished run's duration at most the target; a run still going past the
///    target: missed; still going under it: not tested.
/// An intent not given: no objectives.
std::vector<ObjectiveResult> evaluate_objectives(const spec::IntentSettings& intent, const RunOutcome& outcome);

/// What a tenant's line is decided on.
struct TenantEvidence {
  std::string tenant;
  PilotData data;
  int runs = 0;
  int runs_with_intent = 0;
  int drills_passed = 0;
  std::vector<std::string> failed_drills;     ///< "drill-… on run … : fail (missed: …)"
  std::vector<std::string> leftovers;         ///< "run …: 2 processes left on gpu03 after gen 1"
  std::vector<std::string> missed_objectives; ///< "run …: max_recovery 60s missed (longest 95s)"
};

/// The rules, in order: stop when a drill failed (or could not run) or anything was left behind
/// after a retry; else not yet when the tenant holds under required_days of data, an objective
/// was missed, no drill passed, or no run states an intent; else go. Every reason that applies
/// is listed, not just the first.
TenantVerdict decide_tenant(const TenantEvidence& evidence);

/// The same rules as sentences, for the page and the JSON.
std::vector<std::string> rules();

}  // namespace dtrain::review
