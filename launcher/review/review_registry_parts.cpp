// The review's registry-wide parts (review_builder.h): busy % and the capacity trend of the
// hosts used, owners, quarantined hosts and the permission-relevant audit.

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>

#include "launcher/base/clock.h"
#include "launcher/registry/registry_quarantine.h"
#include "launcher/registry/registry_queries.h"
#include "launcher/registry/registry_usage.h"
#include "launcher/review/review_builder.h"

namespace dtrain::review {
namespace {

constexpr int64_t kDayMs = 24 * 3600 * 1000LL;
constexpr int64_t kWeekMs = 7 * kDayMs;
/// A trend is a change of more than this many percentage points between the first and the last bucket.
constexpr double kTrendPoints = 5.0;

std::string percent(double fraction) {
  char text[32];
  std::snprintf(text, sizeof text, "%.0f %%", 100.0 * fraction);
  return text;
}

bool host_in_scope(const std::string& host, const std::set<std::string>& hosts) { return hosts.count(host) > 0; }

void fill_trend(const ReviewRequest& request, const std::vector<registry::CapacityDay>& days, Review& review) {
  std::map<int64_t, std::pair<double, double>> buckets;  // week index → busy, capacity
  for (const registry::CapacityDay& day : days) {
    std::optional<int64_t> start = registry::parse_date_utc(day.day);
    if (!start) continue;
    int64_t week = std::max<int64_t>(0, (*start - registry::day_start_ms(request.scope.since_ms)) / kWeekMs);
    buckets[week].first += day.busy_unit_hours;
    buckets[week].second += day.capacity * day.hours;
  }
  Operations& operations = review.operations;
  for (const auto& [week, figures] : buckets) {
    double fraction = figures.second > 0 ? figures.first / figures.second : 0;
    operations.capacity_trend.push_back(
        {registry::day_of(registry::day_start_ms(request.scope.since_ms) + week * kWeekMs), fraction});
  }
  if (operations.capacity_trend.size() < 2) {
    operations.trend = "not enough data: fewer than two weeks with hosts in use";
    return;
  }
  double first = operations.capacity_trend.front().busy_fraction;
  double last = operations.capacity_trend.back().busy_fraction;
  double change = 100.0 * (last - first);
  const char* word = change > kTrendPoints ? "rising" : change < -kTrendPoints ? "falling" : "flat";
  operations.trend = std::string(word) + ": busy " + percent(first) + " in the first week, " + percent(last) +
                     " in the last (a change over " + std::to_string(static_cast<int>(kTrendPoints)) +
                     " points is a trend)";
}

std::vector<OwnerRow> owners(const std::vector<registry::UsageRow>& rows) {
  std::vector<OwnerRow> out;
  for (const registry::UsageRow& row : rows) out.push_back({row.group, row.runs, row.gpu_hours, row.slot_hours});
  std::stable_sort(out.begin(), out.end(), [](const OwnerRow& a, const OwnerRow& b) {
    return a.gpu_hours + a.slot_hours > b.gpu_hours + b.slot_hours;
  });
  return out;
}

/// "over quota", "quarantine", "release", "rebuild"; empty for an action that is not about
/// permissions (a plain submit, stop, drill).
std::string audit_category(const registry::AuditRow& row) {
  if (row.action == "hosts quarantine") return "quarantine";
  if (row.action == "hosts release") return "release";
  if (row.action == "registry rebuild") return "rebuild";
  bool over_quota = row.result.find("over quota") != std::string::npos ||
                    row.arguments.find("\"over_quota\":true") != std::string::npos;
  return over_quota ? "over quota" : "";
}

}  // namespace

Status fill_capacity(registry::RegistryDb& db, const ReviewRequest& request, Review& review) {
  registry::CapacityQuery query;
  query.since_ms = request.scope.since_ms;
  query.until_ms = request.scope.until_ms;
  query.now_ms = request.now_ms;
  Result<registry::CapacityReport> capacity = registry::capacity(db, query);
  if (!capacity) return capacity.error();
  std::set<std::string> hosts;
  for (const HostUse& host : review.current.hosts_used) hosts.insert(host.host);
  std::vector<registry::CapacityDay> days;
  std::map<std::string, std::pair<double, double>> by_host;
  std::map<std::string, DayBusy> by_day;
  for (const registry::CapacityDay& day : capacity->days) {
    if (!host_in_scope(day.host, hosts)) continue;
    days.push_back(day);
    double capacity_hours = day.capacity * day.hours;
    by_host[day.host].first += day.busy_unit_hours;
    by_host[day.host].second += capacity_hours;
    DayBusy& total = by_day[day.day];
    total.day = day.day;
    total.busy_unit_hours += day.busy_unit_hours;
    total.capacity_unit_hours += capacity_hours;
  }
  CurrentState& current = review.current;
  double busy = 0;
  for (HostUse& host : current.hosts_used) {
    auto [held, capacity_hours] = by_host[host.host];
    host.busy_fraction = capacity_hours > 0 ? held / capacity_hours : 0;
    busy += held;
    current.capacity_unit_hours += capacity_hours;
  }
  current.busy_fraction = current.capacity_unit_hours > 0 ? busy / current.capacity_unit_hours : 0;
  for (auto& [name, day] : by_day) {
    day.busy_fraction = day.capacity_unit_hours > 0 ? day.busy_unit_hours / day.capacity_unit_hours : 0;
    current.days.push_back(day);
  }
  for (const registry::StandingOutHost& host : capacity->standing_out) {
    if (host_in_scope(host.host, hosts)) review.operations.standing_out.push_back(host);
  }
  fill_trend(request, days, review);
  return {};
}

Status fill_operations(registry::RegistryDb& db, const ReviewRequest& request, Review& review) {
  Operations& operations = review.operations;
  registry::UsageQuery usage;
  usage.since_ms = request.scope.since_ms;
  usage.until_ms = request.scope.until_ms;
  usage.now_ms = request.now_ms;
  if (!request.scope.tenant.empty()) usage.tenant = request.scope.tenant;
  for (registry::UsageGrouping by : {registry::UsageGrouping::tenant, registry::UsageGrouping::user}) {
    usage.by = by;
    Result<std::vector<registry::UsageRow>> rows = registry::usage(db, usage);
    if (!rows) return rows.error();
    (by == registry::UsageGrouping::tenant ? operations.tenants : operations.users) = owners(*rows);
  }
  Result<std::vector<registry::QuarantineRow>> quarantines = registry::quarantine_rows(db);
  if (!quarantines) return quarantines.error();
  for (const registry::QuarantineRow& row : *quarantines) {
    bool overlaps = row.since_ms < request.scope.until_ms &&
                    std::min(row.until_ms, row.released_ms.value_or(row.until_ms)) > request.scope.since_ms;
    bool on_hosts = request.scope.hosts.empty() ||
                    std::find(request.scope.hosts.begin(), request.scope.hosts.end(), row.host) != request.scope.hosts.end();
    if (!overlaps || !on_hosts) continue;
    std::string released;
    if (row.released_ms) {
      released = format_timestamp_utc(*row.released_ms) + " by " + row.released_by +
                 (row.release_reason.empty() ? "" : ": " + row.release_reason);
    }
    operations.quarantined.push_back({row.host, row.reason, format_timestamp_utc(row.since_ms),
                                      format_timestamp_utc(row.until_ms), row.source, row.active_at(request.now_ms),
                                      released});
  }
  registry::AuditQuery audit;
  audit.since_ms = request.scope.since_ms;
  audit.until_ms = request.scope.until_ms;
  Result<std::vector<registry::AuditRow>> rows = registry::audit_log(db, audit);
  if (!rows) return rows.error();
  operations.audit_rows_in_period = static_cast<int>(rows->size());
  for (const registry::AuditRow& row : *rows) {
    std::string category = audit_category(row);
    if (category.empty()) continue;
    operations.audit.push_back({format_timestamp_utc(row.at_ms), category, row.actor, row.action, row.run_id,
                                row.target, row.result});
  }
  return {};
}

}  // namespace dtrain::review
