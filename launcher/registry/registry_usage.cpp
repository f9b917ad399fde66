#include "launcher/registry/registry_usage.h"

#include <sqlite3.h>

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <map>
#include <set>

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

struct GroupTotals {
  double gpu_hours = 0;
  double slot_hours = 0;
  std::set<std::string> runs;
};

}  // namespace

std::optional<int64_t> parse_date_utc(const std::string& text) {
  std::tm parts{};
  parts.tm_mday = 1;  // "YYYY-MM": the month's first day
  const char* format = text.size() == 7 ? "%Y-%m" : "%Y-%m-%d";
  const char* rest = (text.size() == 7 || text.size() == 10) ? ::strptime(text.c_str(), format, &parts) : nullptr;
  if (rest != text.c_str() + text.size()) return std::nullopt;
  return static_cast<int64_t>(::timegm(&parts)) * 1000;
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

Result<std::vector<UsageRow>> usage(RegistryDb& db, const UsageQuery& query) {
  int64_t since = query.since_ms.value_or(INT64_MIN);
  int64_t until = query.until_ms.value_or(INT64_MAX);
  // The period filter runs in SQLite (allocations_by_start); the clipping and month split here.
  Statement select(db.handle(),
                   "SELECT a.run_id, a.host, a.units, a.resource, a.start_ms, a.end_ms, r.tenant, r.user"
                   " FROM allocations a JOIN runs r ON r.id = a.run_id"
                   " WHERE a.start_ms < ?1 AND (a.end_ms IS NULL OR a.end_ms > ?2)");
  select.bind(1, until).bind(2, since);
  if (!select.ok()) return db.error_of("cannot read allocations");
  std::map<std::string, GroupTotals> groups;
  int stepped = 0;
  while ((stepped = select.step()) == SQLITE_ROW) {
    std::string run_id = select.column_text(0);
    int64_t units = select.column_int64(2);
    bool gpu = select.column_text(3) == "gpu";
    int64_t start = std::max(select.column_int64(4), since);
    int64_t end = std::min(select.column_is_null(5) ? query.now_ms : select.column_int64(5), until);
    if (end <= start || units <= 0) continue;
    auto add = [&](const std::string& group, int64_t from, int64_t to) {
      GroupTotals& totals = groups[group];
      double hours = static_cast<double>(units) * static_cast<double>(to - from) / kMillisecondsPerHour;
      (gpu ? totals.gpu_hours : totals.slot_hours) += hours;
      totals.runs.insert(run_id);
    };
    switch (query.by) {
      case UsageGrouping::tenant: add(select.column_text(6), start, end); break;
      case UsageGrouping::user: add(select.column_text(7), start, end); break;
      case UsageGrouping::host: add(select.column_text(1), start, end); break;
      case UsageGrouping::month:
        for (int64_t from = start; from < end;) {
          int64_t to = std::min(end, next_month_start_ms(from));
          add(month_of(from), from, to);
          from = to;
        }
        break;
    }
  }
  if (stepped != SQLITE_DONE) return db.error_of("cannot read allocations");
  std::vector<UsageRow> rows;
  for (const auto& [group, totals] : groups) {
    rows.push_back({group, totals.gpu_hours, totals.slot_hours, static_cast<int64_t>(totals.runs.size())});
  }
  return rows;
}

}  // namespace dtrain::registry
