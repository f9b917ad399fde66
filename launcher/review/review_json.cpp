// The review's JSON (review.h): one declaration per struct names its fields once, for both
// directions, so the JSON that `dtrain review --json` prints reads back into the same struct.

#include <exception>

#include "launcher/review/review.h"

namespace dtrain::registry {
// The registry's own row, as the review holds it (ADL finds these in the row's namespace).
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(StandingOutHost, host, resource, unit_hours, root_cause_failures,
                                                per_1000_hours, median_per_1000_hours)
}  // namespace dtrain::registry

namespace dtrain::review {

// Every field, in declaration order; a missing key keeps the default (WITH_DEFAULT).
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(Scope, since, until, since_ms, until_ms, tenant, hosts)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(HostUse, host, resource, units, unit_hours, busy_fraction, runs,
                                                failures, root_cause_failures)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(DayBusy, day, busy_unit_hours, capacity_unit_hours, busy_fraction)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(FailureCauseCount, kind, count, hosts)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(CurrentState, runs, tenants, hosts, gpus, slots, gpu_hours, slot_hours,
                                                capacity_unit_hours, busy_fraction, runs_by_state, hosts_used, days,
                                                top_failure_causes)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(DrillGrade, at, drill_id, run_id, tenant, mode, verdict, faults, missed,
                                                leftover_processes, from)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(FailureSample, at, run_id, tenant, generation, kind, host, rank,
                                                root_cause, detail, sample, sample_from)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(RecoveryPhase, name, ms)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(RecoveryRecord, at, run_id, tenant, generation, action, cause_kind,
                                                cause_host, total_ms, steps_lost, phases, fallback)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(CheckpointFigures, run_id, tenant, checkpoints, rejected,
                                                interval_steps, interval_ms, bytes, save_seconds, restore_ms)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(ReleaseRecord, at, run_id, tenant, generation, host, killed, remaining,
                                                ms, unconfirmed, detail)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(Validation, drills, failures, recoveries, checkpoints, releases,
                                                leftovers)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(ObjectiveResult, objective, wanted, status, evidence)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(RunObjectives, run_id, tenant, name, intent_given, objectives)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(PilotData, first_run, last_run, days, required_days, enough)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(TenantVerdict, tenant, verdict, reasons, data, runs, runs_with_intent,
                                                drills_passed, drills_failed, objectives_missed, leftovers)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(Decision, runs, data, tenants, rules)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(OwnerRow, owner, runs, gpu_hours, slot_hours)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(TrendPoint, week, busy_fraction)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(QuarantinedHost, host, reason, since, until, source, active, released)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(AuditEntry, at, category, actor, action, run_id, target, result)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(Operations, tenants, users, capacity_trend, trend, standing_out,
                                                quarantined, audit, audit_rows_in_period)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(Review, version, generated, dtrain_version, scope, registry,
                                                drill_history, no_runs, summary, sources, skipped_lines, problems,
                                                current, validation, decision, operations)

nlohmann::json to_json(const Review& review) {
  nlohmann::json out;
  to_json(out, review);
  return out;
}

Result<Review> review_from_json(const nlohmann::json& json) {
  if (!json.is_object()) return Error::user("review: expected a JSON object");
  if (const auto version = json.find("version");
      version != json.end() && version->is_number_integer() && version->get<int>() > kReviewVersion) {
    return Error::user("review: version " + version->dump() + " is newer than this dtrain reads (" +
                       std::to_string(kReviewVersion) + "); upgrade dtrain");
  }
  // nlohmann's get() throws on a field of another type; the exception stays here.
  try {
    return json.get<Review>();
  } catch (const std::exception& error) {
    return Error::user(std::string("review: ") + error.what());
  }
}

}  // namespace dtrain::review
