#include "launcher/registry/registry_queries.h"

#include <sqlite3.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <tuple>

#include "launcher/base/clock.h"
#include "launcher/registry/registry_usage.h"
#include "launcher/registry/statement.h"

namespace dtrain::registry {

namespace {

constexpr double kMillisecondsPerHour = 3600.0 * 1000.0;
constexpr int64_t kMillisecondsPerDay = 24 * 3600 * 1000LL;

double hours_of(int64_t unit_ms) { return static_cast<double>(unit_ms) / kMillisecondsPerHour; }

/// "5000" for a whole number of hours, "12.50" otherwise: budgets are usually round.
std::string hours_text(double hours) {
  char text[64];
  if (std::floor(hours) == hours && hours < 1e15) {
    std::snprintf(text, sizeof text, "%.0f", hours);
  } else {
    std::snprintf(text, sizeof text, "%.2f", hours);
  }
  return text;
}

/// "?N" for the placeholders a filter appends, counted from 1.
class Filters {
 public:
  void add(const std::string& condition_with_placeholder, const std::string& value) {
    add_clause(condition_with_placeholder);
    text_values_.emplace_back(next_index_++, value);
  }
  void add(const std::string& condition_with_placeholder, int64_t value) {
    add_clause(condition_with_placeholder);
    number_values_.emplace_back(next_index_++, value);
  }
  /// " WHERE a AND b" (with each '?' in a condition numbered), or "".
  const std::string& where() const { return where_; }
  void bind(Statement& statement) const {
    for (const auto& [index, value] : text_values_) statement.bind(index, value);
    for (const auto& [index, value] : number_values_) statement.bind(index, value);
  }
  int next_index() const { return next_index_; }

 private:
  void add_clause(const std::string& condition) {
    // Every '?' in one condition is the same value: "?N" each time.
    std::string numbered;
    for (char c : condition) numbered += c == '?' ? "?" + std::to_string(next_index_) : std::string(1, c);
    where_ += (where_.empty() ? " WHERE " : " AND ") + numbered;
  }
  std::string where_;
  int next_index_ = 1;
  std::vector<std::pair<int, std::string>> text_values_;
  std::vector<std::pair<int, int64_t>> number_values_;
};

/// Steps `statement` through its rows, calling `row` for each; errors name the registry file.
template <class OnRow>
Status each_row(RegistryDb& db, Statement& statement, const std::string& what, OnRow&& row) {
  if (!statement.ok()) return db.error_of("cannot read " + what);
  int stepped = 0;
  while ((stepped = statement.step()) == SQLITE_ROW) row();
  if (stepped != SQLITE_DONE) return db.error_of("cannot read " + what);
  return Status::success();
}

std::optional<int64_t> optional_int64(const Statement& statement, int column) {
  if (statement.column_is_null(column)) return std::nullopt;
  return statement.column_int64(column);
}

}  // namespace

std::string day_of(int64_t wall_ms) { return format_timestamp_utc(day_start_ms(wall_ms)).substr(0, 10); }

int64_t day_start_ms(int64_t wall_ms) {
  int64_t remainder = wall_ms % kMillisecondsPerDay;
  return wall_ms - (remainder < 0 ? remainder + kMillisecondsPerDay : remainder);
}

// ---- Quotas -------------------------------------------------------------------------------

const char* quota_kind_name(QuotaKind kind) {
  switch (kind) {
    case QuotaKind::none: return "none";
    case QuotaKind::ok: return "ok";
    case QuotaKind::near: return "near";
    case QuotaKind::over: return "over";
  }
  return "none";
}

Result<QuotaVerdict> check_quota(RegistryDb& db, const std::optional<QuotaBudget>& budget, const std::string& tenant,
                                 int64_t now_ms) {
  QuotaVerdict verdict;
  verdict.tenant = tenant;
  verdict.month = month_of(now_ms);
  UsageQuery query;
  query.by = UsageGrouping::tenant;
  query.tenant = tenant;
  // The month so far: from its first instant (the next month's start, one month back) to now.
  query.since_ms = parse_date_utc(verdict.month);
  query.until_ms = now_ms;
  query.now_ms = now_ms;
  Result<std::vector<UsageRow>> used = usage(db, query);
  if (!used) return used.error();
  for (const UsageRow& row : *used) {
    verdict.gpu_hours_used += row.gpu_hours;
    verdict.slot_hours_used += row.slot_hours;
  }
  std::string who = "tenant " + (tenant.empty() ? std::string("(none)") : tenant);
  if (!budget || (!budget->gpu_hours && !budget->slot_hours)) {
    verdict.message = who + " has no quota; used " + hours_text(std::round(verdict.gpu_hours_used * 10) / 10) +
                      " GPU-hours in " + verdict.month;
    return verdict;
  }
  verdict.gpu_hours_budget = budget->gpu_hours;
  verdict.slot_hours_budget = budget->slot_hours;
  verdict.warn_at = budget->warn_at;
  verdict.kind = QuotaKind::ok;
  std::string parts;
  auto judge = [&](double used_hours, const std::optional<double>& limit, const char* unit) {
    if (!limit) return;
    QuotaKind kind = used_hours >= *limit                  ? QuotaKind::over
                     : used_hours >= budget->warn_at * *limit ? QuotaKind::near
                                                              : QuotaKind::ok;
    verdict.kind = std::max(verdict.kind, kind);
    char line[256];
    double percent = *limit > 0 ? 100.0 * used_hours / *limit : (used_hours > 0 ? INFINITY : 0);
    std::snprintf(line, sizeof line, "%.1f of %s %s (%s)", used_hours, hours_text(*limit).c_str(), unit,
                  std::isfinite(percent) ? (std::to_string(static_cast<int64_t>(percent)) + " %").c_str() : "over");
    parts += (parts.empty() ? "" : " and ") + std::string(line);
  };
  judge(verdict.gpu_hours_used, budget->gpu_hours, "GPU-hours");
  judge(verdict.slot_hours_used, budget->slot_hours, "slot-hours");
  verdict.message = who + " has used " + parts + " of its budget for " + verdict.month + " (UTC)";
  return verdict;
}

// ---- History ------------------------------------------------------------------------------

Result<HistoryPage> history(RegistryDb& db, const HistoryQuery& query) {
  Filters filters;
  if (query.tenant) filters.add("r.tenant = ?", *query.tenant);
  if (query.user) filters.add("r.user = ?", *query.user);
  if (query.state) filters.add("r.state = ?", *query.state);
  if (query.since_ms) filters.add("r.submitted_ms >= ?", *query.since_ms);
  if (query.until_ms) filters.add("r.submitted_ms < ?", *query.until_ms);
  HistoryPage page;
  {
    Statement count(db.handle(), "SELECT COUNT(*) FROM runs r" + filters.where());
    filters.bind(count);
    Status counted = each_row(db, count, "runs", [&] { page.matching = count.column_int64(0); });
    if (!counted) return counted.error();
  }
  // The page of runs first (a top-N sort of runs alone), then their allocations by index: the
  // hours are summed for the runs shown, not for every run matched.
  int now_index = filters.next_index();
  // Three scalar subqueries over allocations_by_run (SQLite has no row-valued one here).
  std::string per_run = "FROM allocations a WHERE a.run_id = r.id)";
  std::string sql = "SELECT r.id, r.tenant, r.user, r.name, r.spec_hash, r.run_dir, r.submitted_ms, r.started_ms, r.ended_ms,"
        " r.state, r.exit_code, r.exit_reason,"
        " (SELECT SUM(CASE WHEN a.resource = 'gpu' THEN a.units * (COALESCE(a.end_ms, ?N) - a.start_ms) ELSE 0 END) " +
        per_run + ", (SELECT SUM(CASE WHEN a.resource = 'slot' THEN a.units * (COALESCE(a.end_ms, ?N) - a.start_ms) ELSE 0 END) " +
        per_run + ", (SELECT MAX(COALESCE(a.end_ms, ?N)) " + per_run +
        " FROM (SELECT r.id FROM runs r" + filters.where() + " ORDER BY r.submitted_ms DESC, r.id DESC" +
        (query.limit > 0 ? " LIMIT " + std::to_string(query.limit) : std::string()) +
        ") p JOIN runs r ON r.id = p.id ORDER BY r.submitted_ms DESC, r.id DESC";
  for (size_t at = sql.find("?N"); at != std::string::npos; at = sql.find("?N", at)) {
    sql.replace(at, 2, "?" + std::to_string(now_index));
  }
  Statement select(db.handle(), sql);
  filters.bind(select);
  select.bind(now_index, query.now_ms);
  std::map<std::string, size_t> index_of;
  Status read = each_row(db, select, "runs", [&] {
    HistoryRow row;
    RunRow& run = row.run;
    run.id = select.column_text(0);
    run.tenant = select.column_text(1);
    run.user = select.column_text(2);
    run.name = select.column_text(3);
    run.spec_hash = select.column_text(4);
    run.run_dir = select.column_text(5);
    run.submitted_ms = select.column_int64(6);
    run.started_ms = optional_int64(select, 7);
    run.ended_ms = optional_int64(select, 8);
    run.state = select.column_text(9);
    if (!select.column_is_null(10)) run.exit_code = select.column_int(10);
    run.exit_reason = select.column_text(11);
    row.gpu_hours = hours_of(select.column_int64(12));
    row.slot_hours = hours_of(select.column_int64(13));
    std::optional<int64_t> last_held = optional_int64(select, 14);
    // A run still running has no end yet: its duration runs to now; one that ended without a
    // recorded end (the supervisor died) ends with its last allocation.
    std::optional<int64_t> end = run.ended_ms ? run.ended_ms : last_held;
    if (run.started_ms && end && *end >= *run.started_ms) row.duration_ms = *end - *run.started_ms;
    index_of[run.id] = page.rows.size();
    page.rows.push_back(std::move(row));
  });
  if (!read) return read.error();
  if (page.rows.empty()) return page;
  // Failures of the runs shown, in one pass over the failures table (it has no index by run).
  std::string placeholders;
  for (size_t i = 0; i < page.rows.size(); ++i) placeholders += (i ? ",?" : "?");
  Statement failures(db.handle(), "SELECT run_id, COUNT(*), SUM(root_cause) FROM failures WHERE run_id IN (" +
                                      placeholders + ") GROUP BY run_id");
  for (size_t i = 0; i < page.rows.size(); ++i) failures.bind(static_cast<int>(i + 1), page.rows[i].run.id);
  Status counted = each_row(db, failures, "failures", [&] {
    HistoryRow& row = page.rows[index_of[failures.column_text(0)]];
    row.failures = failures.column_int(1);
    row.root_cause_failures = failures.column_int(2);
  });
  if (!counted) return counted.error();
  return page;
}

// ---- Audit --------------------------------------------------------------------------------

Result<std::vector<AuditRow>> audit_log(RegistryDb& db, const AuditQuery& query) {
  Filters filters;
  if (query.run_id) filters.add("run_id = ?", *query.run_id);
  // The person either way round a sudo: "alice", "alice (sudo from bob)", "root (sudo from alice)".
  // substr, not LIKE: '_' and '%' are ordinary characters of a user name.
  if (query.actor) {
    filters.add("(actor = ? OR substr(actor, 1, length(?) + 12) = ? || ' (sudo from '"
                " OR substr(actor, -(length(?) + 13)) = ' (sudo from ' || ? || ')')",
                *query.actor);
  }
  if (query.action) filters.add("action = ?", *query.action);
  if (query.since_ms) filters.add("at_ms >= ?", *query.since_ms);
  if (query.until_ms) filters.add("at_ms < ?", *query.until_ms);
  // The newest `limit` rows, then put back in the order they happened.
  std::string sql = "SELECT at_ms, actor, action, run_id, target, arguments, result FROM (SELECT rowid AS row, * FROM audit" +
                    filters.where() + " ORDER BY at_ms DESC, rowid DESC" +
                    (query.limit > 0 ? " LIMIT " + std::to_string(query.limit) : std::string()) +
                    ") ORDER BY at_ms, row";
  Statement select(db.handle(), sql);
  filters.bind(select);
  std::vector<AuditRow> rows;
  Status read = each_row(db, select, "the audit table", [&] {
    rows.push_back({select.column_int64(0), select.column_text(1), select.column_text(2), select.column_text(3),
                    select.column_text(4), select.column_text(5), select.column_text(6)});
  });
  if (!read) return read.error();
  return rows;
}

// ---- Host reliability ---------------------------------------------------------------------

std::optional<double> HostReliability::root_failures_per_1000_hours() const {
  if (unit_hours() <= 0) return std::nullopt;
  return 1000.0 * root_cause_failures / unit_hours();
}

Result<std::vector<HostReliability>> host_reliability(RegistryDb& db, const PeriodQuery& query) {
  std::map<std::string, HostReliability> hosts;
  auto host = [&](const std::string& name) -> HostReliability& {
    HostReliability& found = hosts[name];
    found.host = name;
    return found;
  };
  UsageQuery held;
  held.by = UsageGrouping::host;
  held.since_ms = query.since_ms;
  held.until_ms = query.until_ms;
  held.now_ms = query.now_ms;
  Result<std::vector<UsageRow>> hours = usage(db, held);
  if (!hours) return hours.error();
  for (const UsageRow& row : *hours) {
    host(row.group).gpu_hours = row.gpu_hours;
    host(row.group).slot_hours = row.slot_hours;
  }
  int64_t since = query.since_ms.value_or(INT64_MIN);
  int64_t until = query.until_ms.value_or(INT64_MAX);
  // A failure without a host (the supervisor's own) is nobody's to blame.
  Statement failures(db.handle(),
                     "SELECT host, COUNT(*), SUM(root_cause) FROM failures WHERE host != '' AND detected_ms >= ?1"
                     " AND detected_ms < ?2 GROUP BY host");
  failures.bind(1, since).bind(2, until);
  Status read = each_row(db, failures, "failures", [&] {
    HostReliability& row = host(failures.column_text(0));
    row.failures = failures.column_int(1);
    row.root_cause_failures = failures.column_int(2);
  });
  if (!read) return read.error();
  // Ordered by time, so the last exclusion seen per host is its latest.
  Statement events(db.handle(),
                   "SELECT host, kind, reason, at_ms FROM host_events WHERE kind IN ('lost', 'excluded')"
                   " AND at_ms >= ?1 AND at_ms < ?2 ORDER BY at_ms, rowid");
  events.bind(1, since).bind(2, until);
  read = each_row(db, events, "host events", [&] {
    HostReliability& row = host(events.column_text(0));
    if (events.column_text(1) == "lost") {
      row.times_lost += 1;
    } else {
      row.times_excluded += 1;
      row.last_excluded_ms = events.column_int64(3);
      row.last_excluded_reason = events.column_text(2);
    }
  });
  if (!read) return read.error();
  std::vector<HostReliability> rows;
  rows.reserve(hosts.size());
  for (auto& [name, row] : hosts) rows.push_back(std::move(row));
  return rows;
}

// ---- Capacity hint ------------------------------------------------------------------------

namespace {

/// The hosts whose root-cause failure rate stands out among the compared hosts of one resource.
void find_standing_out(const std::vector<HostReliability>& hosts, const CapacityQuery& query, bool gpu,
                       CapacityReport& report) {
  std::vector<const HostReliability*> compared;
  for (const HostReliability& host : hosts) {
    double hours = gpu ? host.gpu_hours : host.slot_hours;
    // A host is of the kind it held most of (one that changed kind is rare and judged once).
    bool of_kind = gpu ? host.gpu_hours >= host.slot_hours : host.slot_hours > host.gpu_hours;
    if (of_kind && hours >= query.min_unit_hours) compared.push_back(&host);
  }
  (gpu ? report.compared_gpu_hosts : report.compared_slot_hosts) = static_cast<int>(compared.size());
  if (compared.empty()) return;
  std::vector<double> rates;
  for (const HostReliability* host : compared) rates.push_back(*host->root_failures_per_1000_hours());
  std::sort(rates.begin(), rates.end());
  size_t middle = rates.size() / 2;
  double median = rates.size() % 2 == 1 ? rates[middle] : (rates[middle - 1] + rates[middle]) / 2;
  for (const HostReliability* host : compared) {
    double rate = *host->root_failures_per_1000_hours();
    if (host->root_cause_failures >= query.min_failures && rate > query.factor_over_median * median) {
      report.standing_out.push_back({host->host, gpu ? "gpu" : "slot", host->unit_hours(), host->root_cause_failures,
                                     rate, median});
    }
  }
}

}  // namespace

Result<CapacityReport> capacity(RegistryDb& db, const CapacityQuery& query) {
  CapacityReport report;
  // The future is not idle time: the period ends at now at the latest.
  int64_t since = query.since_ms;
  int64_t until = std::min(query.until_ms, query.now_ms);
  // Every host ever allocated, with the most units it held at once in one allocation.
  std::map<std::pair<std::string, std::string>, int> capacity_of;  // (host, resource) → units
  Statement sizes(db.handle(), "SELECT host, resource, MAX(units) FROM allocations GROUP BY host, resource");
  Status read = each_row(db, sizes, "allocations", [&] {
    capacity_of[{sizes.column_text(0), sizes.column_text(1)}] = sizes.column_int(2);
  });
  if (!read) return read.error();
  std::map<std::tuple<std::string, std::string, int64_t>, int64_t> busy_ms;  // (host, resource, day) → unit-ms
  if (until > since) {
    Statement held(db.handle(),
                   "SELECT a.host, a.resource, a.units, MAX(a.start_ms, ?2), MIN(COALESCE(a.end_ms, ?3), ?1)"
                   " FROM allocations a WHERE +a.start_ms < ?1 AND COALESCE(a.end_ms, ?3) > ?2 AND a.units > 0");
    held.bind(1, until).bind(2, since).bind(3, query.now_ms);
    read = each_row(db, held, "allocations", [&] {
      std::string host = held.column_text(0), resource = held.column_text(1);
      int64_t units = held.column_int64(2);
      int64_t end = held.column_int64(4);
      for (int64_t from = held.column_int64(3); from < end;) {
        int64_t day = day_start_ms(from);
        int64_t to = std::min(end, day + kMillisecondsPerDay);
        busy_ms[{host, resource, day}] += units * (to - from);
        from = to;
      }
    });
    if (!read) return read.error();
  }
  for (const auto& [key, units] : capacity_of) {
    const auto& [host, resource] = key;
    for (int64_t day = day_start_ms(since); day < until; day += kMillisecondsPerDay) {
      CapacityDay row;
      row.host = host;
      row.resource = resource;
      row.day = day_of(day);
      row.capacity = units;
      row.hours = hours_of(std::min(until, day + kMillisecondsPerDay) - std::max(since, day));
      auto busy = busy_ms.find({host, resource, day});
      row.busy_unit_hours = busy == busy_ms.end() ? 0 : hours_of(busy->second);
      double available = units * row.hours;
      row.idle_unit_hours = std::max(0.0, available - row.busy_unit_hours);
      row.busy_fraction = available > 0 ? row.busy_unit_hours / available : 0;
      report.days.push_back(std::move(row));
    }
  }
  PeriodQuery period{since, until, query.now_ms};
  Result<std::vector<HostReliability>> hosts = host_reliability(db, period);
  if (!hosts) return hosts.error();
  find_standing_out(*hosts, query, true, report);
  find_standing_out(*hosts, query, false, report);
  return report;
}

}  // namespace dtrain::registry
