#include "launcher/registry/registry_usage.h"

#include <sqlite3.h>

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <map>
#include <string_view>
#include <tuple>

#include "launcher/base/clock.h"
#include "launcher/registry/statement.h"

namespace dtrain::registry {

namespace {

constexpr double kMillisecondsPerHour = 3600.0 * 1000.0;

std::tm utc_parts(int64_t wall_ms) {
  time_t seconds = static_cast<time_t>(wall_ms / 1000 - (wall_ms % 1000 < 0 ? 1 : 0));
  std::tm parts{};
  ::gmtime_r(&seconds, &parts);
  return parts;
}


}  // namespace

std::optional<int64_t> parse_date_utc(const std::string& text) {
  // "YYYY-MM" (the month's first day) or "YYYY-MM-DD", checked by the events' own parser: a day
  // that does not exist (2026-02-30) is an error, not the 2nd of March.
  if (text.size() != 7 && text.size() != 10) return std::nullopt;
  return parse_timestamp_utc(text + (text.size() == 7 ? "-01" : "") + "T00:00:00.000Z");
}

Result<Period> parse_period(const std::string& since, const std::string& until) {
  Period period;
  for (auto [text, bound, flag] : {std::tuple{&since, &period.since_ms, "--since"},
                                   std::tuple{&until, &period.until_ms, "--until"}}) {
    if (text->empty()) continue;
    *bound = parse_date_utc(*text);
    if (!*bound) return Error::user(std::string(flag) + " '" + *text + "' is not a date; use YYYY-MM-DD or YYYY-MM (UTC)");
  }
  if (period.since_ms && period.until_ms && *period.until_ms <= *period.since_ms) {
    return Error::user("--until " + until + " is not after --since " + since);
  }
  return period;
}

std::string format_time_utc(int64_t wall_ms) {
  std::string text = format_timestamp_utc(wall_ms).substr(0, 19);  // 2026-12-02T02:10:05
  text[10] = ' ';
  return text;
}

std::string csv_field(const std::string& text) {
  if (text.find_first_of(",\"\n") == std::string::npos) return text;
  std::string quoted = "\"";
  for (char c : text) quoted += (c == '"') ? std::string("\"\"") : std::string(1, c);
  return quoted + "\"";
}

int64_t next_month_start_ms(int64_t wall_ms) {
  std::tm parts = utc_parts(wall_ms);
  std::tm next{};
  next.tm_year = parts.tm_mon == 11 ? parts.tm_year + 1 : parts.tm_year;
  next.tm_mon = (parts.tm_mon + 1) % 12;
  next.tm_mday = 1;
  return static_cast<int64_t>(::timegm(&next)) * 1000;
}

std::string month_of(int64_t wall_ms) {
  std::tm parts = utc_parts(wall_ms);
  char text[32];
  std::snprintf(text, sizeof text, "%04d-%02d", parts.tm_year + 1900, parts.tm_mon + 1);
  return text;
}

namespace {

// The period's clip of one allocation, in unit-milliseconds, for GPUs and for slots. ?1 until,
// ?2 since, ?3 now (where allocations still held end). The filter is on +a.start_ms: scanning
// the table beats walking allocations_by_start for the long periods reports cover.
constexpr const char* kClippedGpu =
    "SUM(CASE WHEN a.resource = 'gpu' THEN a.units * (MIN(COALESCE(a.end_ms, ?3), ?1) - MAX(a.start_ms, ?2)) ELSE 0 END)";
constexpr const char* kClippedSlot =
    "SUM(CASE WHEN a.resource = 'slot' THEN a.units * (MIN(COALESCE(a.end_ms, ?3), ?1) - MAX(a.start_ms, ?2)) ELSE 0 END)";
constexpr const char* kInPeriod =
    " WHERE +a.start_ms < ?1 AND COALESCE(a.end_ms, ?3) > ?2 AND COALESCE(a.end_ms, ?3) > a.start_ms AND a.units > 0";

/// kInPeriod, and only the query's tenant's runs when it names one (bound as ?4).
std::string in_period(const UsageQuery& query) {
  return std::string(kInPeriod) + (query.tenant ? " AND a.run_id IN (SELECT id FROM runs WHERE tenant = ?4)" : "");
}

void bind_period(Statement& select, const UsageQuery& query, int64_t since, int64_t until) {
  select.bind(1, until).bind(2, since).bind(3, query.now_ms);
  if (query.tenant) select.bind(4, *query.tenant);
}

Result<std::vector<UsageRow>> collect_rows(RegistryDb& db, const std::string& sql, const UsageQuery& query,
                                           int64_t since, int64_t until) {
  Statement select(db.handle(), sql);
  bind_period(select, query, since, until);
  if (!select.ok()) return db.error_of("cannot read allocations");
  std::vector<UsageRow> rows;
  int stepped = 0;
  while ((stepped = select.step()) == SQLITE_ROW) {
    rows.push_back({select.column_text(0), static_cast<double>(select.column_int64(1)) / kMillisecondsPerHour,
                    static_cast<double>(select.column_int64(2)) / kMillisecondsPerHour, select.column_int64(3)});
  }
  if (stepped != SQLITE_DONE) return db.error_of("cannot read allocations");
  return rows;
}

/// Tenant or user (columns of runs): summed per run first (allocations_by_run), then per group,
/// so that each run is looked up once and counted once. 100,000 runs: well under a second
/// (scripts/bench/registry.sh); a row-by-row loop here took 1.4 s.
Result<std::vector<UsageRow>> usage_by_run_column(RegistryDb& db, const char* column, const UsageQuery& query,
                                                  int64_t since, int64_t until) {
  std::string sql = std::string("SELECT r.") + column +
                    ", SUM(p.gpu), SUM(p.slot), COUNT(*) FROM (SELECT a.run_id AS run_id, " + kClippedGpu + " AS gpu, " +
                    kClippedSlot + " AS slot FROM allocations a" + in_period(query) +
                    " GROUP BY a.run_id) p JOIN runs r ON r.id = p.run_id GROUP BY 1 ORDER BY 1";
  return collect_rows(db, sql, query, since, until);
}

Result<std::vector<UsageRow>> usage_by_host(RegistryDb& db, const UsageQuery& query, int64_t since, int64_t until) {
  std::string sql = std::string("SELECT a.host, ") + kClippedGpu + ", " + kClippedSlot +
                    ", COUNT(DISTINCT a.run_id) FROM allocations a" + in_period(query) + " GROUP BY 1 ORDER BY 1";
  return collect_rows(db, sql, query, since, until);
}

/// By month: each allocation, clipped to the period, is split at the UTC month boundaries.
/// Rows come ordered by run, so a run is counted once per month by comparing with the last one.
Result<std::vector<UsageRow>> usage_by_month(RegistryDb& db, const UsageQuery& query, int64_t since, int64_t until) {
  std::string sql = std::string("SELECT a.run_id, a.units, a.resource = 'gpu', MAX(a.start_ms, ?2),") +
                    " MIN(COALESCE(a.end_ms, ?3), ?1) FROM allocations a" + in_period(query) + " ORDER BY a.run_id";
  Statement select(db.handle(), sql);
  bind_period(select, query, since, until);
  if (!select.ok()) return db.error_of("cannot read allocations");
  struct MonthTotals {
    int64_t gpu_ms = 0;  // unit-milliseconds
    int64_t slot_ms = 0;
    int64_t runs = 0;
    std::string last_run;
  };
  std::map<int, MonthTotals> months;  // by year * 12 + month - 1, UTC
  int stepped = 0;
  while ((stepped = select.step()) == SQLITE_ROW) {
    const unsigned char* run_text = sqlite3_column_text(select.raw(), 0);
    std::string_view run = run_text ? reinterpret_cast<const char*>(run_text) : "";
    int64_t units = select.column_int64(1);
    bool gpu = select.column_int(2) != 0;
    int64_t end = select.column_int64(4);
    for (int64_t from = select.column_int64(3); from < end;) {
      std::tm parts = utc_parts(from);
      int64_t to = std::min(end, next_month_start_ms(from));
      MonthTotals& totals = months[(parts.tm_year + 1900) * 12 + parts.tm_mon];
      (gpu ? totals.gpu_ms : totals.slot_ms) += units * (to - from);
      if (totals.last_run != run) {
        totals.last_run = run;
        totals.runs += 1;
      }
      from = to;
    }
  }
  if (stepped != SQLITE_DONE) return db.error_of("cannot read allocations");
  std::vector<UsageRow> rows;
  for (const auto& [month, totals] : months) {
    char name[32];
    std::snprintf(name, sizeof name, "%04d-%02d", month / 12, month % 12 + 1);
    rows.push_back({name, static_cast<double>(totals.gpu_ms) / kMillisecondsPerHour,
                    static_cast<double>(totals.slot_ms) / kMillisecondsPerHour, totals.runs});
  }
  return rows;
}

}  // namespace

Result<std::vector<UsageRow>> usage(RegistryDb& db, const UsageQuery& query) {
  int64_t since = query.since_ms.value_or(INT64_MIN);
  int64_t until = query.until_ms.value_or(INT64_MAX);
  switch (query.by) {
    case UsageGrouping::tenant: return usage_by_run_column(db, "tenant", query, since, until);
    case UsageGrouping::user: return usage_by_run_column(db, "user", query, since, until);
    case UsageGrouping::host: return usage_by_host(db, query, since, until);
    case UsageGrouping::month: break;
  }
  return usage_by_month(db, query, since, until);
}

}  // namespace dtrain::registry
