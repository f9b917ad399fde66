#pragma once
// The registry's read side beyond `dtrain usage`: the quota check `dtrain submit` makes, the run
// history, the audit log, host reliability and the capacity hint. Each is a pure query over the
// registry (no clock: the caller passes now_ms, where allocations still held end). Hours are
// unit-hours: GPU-hours on hosts with GPUs, slot-hours (worker slots held) on hosts without.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "launcher/base/result.h"
#include "launcher/registry/registry_db.h"

namespace dtrain::registry {

// ---- Quotas -------------------------------------------------------------------------------

/// A tenant's budget for one calendar month (UTC); a limit left out is not limited. The same
/// fields as spec::TenantBudget, which spec::budget_for_tenant() reads from the site config
/// (launcher/registry may not depend on launcher/spec).
struct QuotaBudget {
  std::optional<double> gpu_hours;
  std::optional<double> slot_hours;
  double warn_at = 0.8;  ///< the fraction of a budget from which the verdict is `near`
};

enum class QuotaKind {
  none,  ///< no budget for this tenant
  ok,    ///< below warn_at of every budget
  near,  ///< at or above warn_at of a budget, below the budget
  over,  ///< at or above a budget: submit refuses without --over-quota
};

const char* quota_kind_name(QuotaKind kind);  ///< "none", "ok", "near", "over"

struct QuotaVerdict {
  QuotaKind kind = QuotaKind::none;
  std::string tenant;
  std::string month;  ///< "YYYY-MM" (UTC) of now_ms
  double gpu_hours_used = 0;   ///< this month so far, runs still running counted up to now
  double slot_hours_used = 0;
  std::optional<double> gpu_hours_budget;
  std::optional<double> slot_hours_budget;
  double warn_at = 0.8;
  /// One line with the numbers: "tenant vision has used 4,250.0 of 5,000 GPU-hours in 2026-12 (85 %)".
  std::string message;
};

/// The tenant's use this UTC month (from its first instant to now_ms; a run across the month
/// boundary counts only its part in this month) against `budget`. A null budget gives kind none
/// (with the use still measured). Errors name the registry file.
Result<QuotaVerdict> check_quota(RegistryDb& db, const std::optional<QuotaBudget>& budget, const std::string& tenant,
                                 int64_t now_ms);

// ---- History ------------------------------------------------------------------------------

struct HistoryQuery {
  std::optional<std::string> tenant;  ///< exact; "" selects runs without a tenant
  std::optional<std::string> user;
  std::optional<std::string> state;
  std::optional<int64_t> since_ms;  ///< submitted at or after (inclusive)
  std::optional<int64_t> until_ms;  ///< submitted before (exclusive)
  int limit = 50;                   ///< newest first; 0: all
  int64_t now_ms = 0;
};

struct HistoryRow {
  RunRow run;
  double gpu_hours = 0;   ///< every allocation of the run, ones still held up to now
  double slot_hours = 0;
  int failures = 0;
  int root_cause_failures = 0;
  std::optional<int64_t> duration_ms;  ///< first generation to the end (or now, or its last allocation)
};

struct HistoryPage {
  std::vector<HistoryRow> rows;  ///< newest submitted first
  int64_t matching = 0;          ///< runs matching the filters, before the limit
};

Result<HistoryPage> history(RegistryDb& db, const HistoryQuery& query);

// ---- Audit --------------------------------------------------------------------------------

struct AuditQuery {
  std::optional<std::string> run_id;
  /// "alice" matches "alice", "alice (sudo from bob)" and "root (sudo from alice)": the person
  /// either way.
  std::optional<std::string> actor;
  std::optional<std::string> action;
  std::optional<int64_t> since_ms;  ///< inclusive
  std::optional<int64_t> until_ms;  ///< exclusive
  int limit = 0;                    ///< the newest N (still printed oldest first); 0: all
};

/// Oldest first (the order things happened; rows at the same millisecond in insertion order).
Result<std::vector<AuditRow>> audit_log(RegistryDb& db, const AuditQuery& query);

// ---- Host reliability ---------------------------------------------------------------------

struct PeriodQuery {
  std::optional<int64_t> since_ms;  ///< inclusive
  std::optional<int64_t> until_ms;  ///< exclusive
  int64_t now_ms = 0;
};

struct HostReliability {
  std::string host;
  double gpu_hours = 0;   ///< held in the period
  double slot_hours = 0;
  int failures = 0;             ///< every failure detected on the host in the period
  int root_cause_failures = 0;  ///< the ones that were the root cause (the others are cascades)
  int times_lost = 0;
  int times_excluded = 0;
  std::optional<int64_t> last_excluded_ms;  ///< the latest exclusion in the period
  std::string last_excluded_reason;

  double unit_hours() const { return gpu_hours + slot_hours; }
  /// Root-cause failures per 1,000 unit-hours; none when the host held nothing in the period.
  std::optional<double> root_failures_per_1000_hours() const;
};

/// Every host with an allocation, failure or host event in the period, by name.
Result<std::vector<HostReliability>> host_reliability(RegistryDb& db, const PeriodQuery& query);

// ---- Capacity hint ------------------------------------------------------------------------

struct CapacityQuery {
  int64_t since_ms = 0;  ///< required here: the CLI picks a default period
  int64_t until_ms = 0;
  int64_t now_ms = 0;
  /// A host's failure rate is compared only when it held at least this many unit-hours in the
  /// period (a short stint with one failure is not a rate)...
  double min_unit_hours = 100;
  /// ...and stands out with at least this many root-cause failures...
  int min_failures = 2;
  /// ...at more than this many times the median rate of the compared hosts of its kind.
  double factor_over_median = 2.0;
};

struct CapacityDay {
  std::string host;
  std::string day;       ///< "YYYY-MM-DD" (UTC)
  std::string resource;  ///< "gpu" or "slot"
  /// The most units the host ever held in one allocation: the registry has no inventory, so a
  /// host's size is what a run was once given of it.
  int capacity = 0;
  double hours = 0;             ///< of this day inside the period (24 but for the period's ends)
  double busy_unit_hours = 0;   ///< units held × hours, all runs together
  double idle_unit_hours = 0;   ///< capacity × hours − busy, at least 0
  double busy_fraction = 0;     ///< busy / (capacity × hours); above 1 when runs shared the host
};

struct StandingOutHost {
  std::string host;
  std::string resource;
  double unit_hours = 0;
  int root_cause_failures = 0;
  double per_1000_hours = 0;
  double median_per_1000_hours = 0;  ///< of the compared hosts of the same resource
};

struct CapacityReport {
  std::vector<CapacityDay> days;  ///< by host, then day; every known host on every day
  std::vector<StandingOutHost> standing_out;
  int compared_gpu_hosts = 0;   ///< hosts with at least min_unit_hours, whose median is used
  int compared_slot_hosts = 0;
};

Result<CapacityReport> capacity(RegistryDb& db, const CapacityQuery& query);

/// "YYYY-MM-DD" of `wall_ms` in UTC, and the Unix ms of that day's midnight.
std::string day_of(int64_t wall_ms);
int64_t day_start_ms(int64_t wall_ms);

}  // namespace dtrain::registry
