#pragma once
// `dtrain usage`: GPU-hours (slot-hours on CPU hosts) from the allocations table, grouped by
// tenant, user, host or month, over a period. Overlap-correct: an allocation counts only for the
// part of it inside the period, and one across a month boundary is split between the months.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "launcher/base/result.h"
#include "launcher/registry/registry_db.h"

namespace dtrain::registry {

enum class UsageGrouping { tenant, user, host, month };

struct UsageQuery {
  UsageGrouping by = UsageGrouping::tenant;
  std::optional<int64_t> since_ms;  ///< inclusive
  std::optional<int64_t> until_ms;  ///< exclusive
  /// Where allocations still held (end_ms NULL) end for this report.
  int64_t now_ms = 0;
  /// Only this tenant's runs ("" : runs without a tenant); none: every run. The quota check.
  std::optional<std::string> tenant;
};

struct UsageRow {
  std::string group;  ///< tenant ("" when none), user, host, or "YYYY-MM"
  double gpu_hours = 0;
  double slot_hours = 0;  ///< worker slots on hosts without GPUs
  int64_t runs = 0;       ///< distinct runs with time in this group and period
};

/// Rows sorted by group. Errors name the registry file.
Result<std::vector<UsageRow>> usage(RegistryDb& db, const UsageQuery& query);

/// "YYYY-MM-DD" or "YYYY-MM" (UTC midnight of that day, or of the month's first day) → Unix ms.
std::optional<int64_t> parse_date_utc(const std::string& text);

/// Unix ms of the first instant of the UTC month after the one holding `wall_ms`.
int64_t next_month_start_ms(int64_t wall_ms);

/// "YYYY-MM" of `wall_ms` in UTC.
std::string month_of(int64_t wall_ms);

/// --since / --until of every registry report, parsed: each "" (not given), "YYYY-MM-DD" or
/// "YYYY-MM"; a bad date or an --until not after --since is a user error that says the form.
struct Period {
  std::optional<int64_t> since_ms;  ///< inclusive
  std::optional<int64_t> until_ms;  ///< exclusive
};
Result<Period> parse_period(const std::string& since, const std::string& until);

/// "2026-12-02 02:10:05": a time in a report's table (the header says UTC).
std::string format_time_utc(int64_t wall_ms);

/// A CSV field: quoted when it holds a comma, quote or newline (tenant names are free text).
std::string csv_field(const std::string& text);

}  // namespace dtrain::registry
