// `dtrain usage [--by tenant|user|host|month] [--since DATE] [--until DATE] [--json|--csv]`:
// GPU-hours (slot-hours on hosts without GPUs) from the run registry's allocations, counted only
// inside the period and split at month boundaries, with their cost when $DTRAIN_HOME/config.yaml
// has prices. `dtrain usage --capacity`: busy and idle unit-hours per host per UTC day, and the
// hosts whose failure rate stands out. Reads $DTRAIN_HOME/registry.db; when it is missing, says to
// build it with `dtrain registry rebuild`. See man/dtrain-registry.1.

#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "launcher/base/clock.h"
#include "launcher/base/exit_code.h"
#include "launcher/registry/registry_db.h"
#include "launcher/registry/registry_queries.h"
#include "launcher/registry/registry_usage.h"
#include "launcher/runlog/run_directory.h"
#include "launcher/spec/site_config.h"

namespace dtrain::cli {
namespace {

constexpr int64_t kDayMs = 24 * 3600 * 1000LL;
/// --capacity without --since: today and the six days before (UTC).
constexpr int kDefaultCapacityDays = 7;

struct UsageOptions {
  std::string by = "tenant";
  std::string since;
  std::string until;
  bool json = false;
  bool csv = false;
  bool capacity = false;
};

registry::UsageGrouping grouping_of(const std::string& by) {
  if (by == "user") return registry::UsageGrouping::user;
  if (by == "host") return registry::UsageGrouping::host;
  if (by == "month") return registry::UsageGrouping::month;
  return registry::UsageGrouping::tenant;
}

int fail(const Error& error) {
  std::fprintf(stderr, "dtrain usage: %s\n", error.message.c_str());
  return exit_code_for(error);
}

std::string period_text(const UsageOptions& options) {
  return (options.since.empty() ? std::string("the beginning") : options.since) + " to " +
         (options.until.empty() ? std::string("now") : options.until) + " (UTC)";
}

double cost_of(const registry::UsageRow& row, const spec::CostRates& rates) {
  return row.gpu_hours * rates.per_gpu_hour + row.slot_hours * rates.per_slot_hour;
}

int show_usage(const UsageOptions& options, const registry::Period& period, registry::RegistryDb& db,
               const std::optional<spec::CostRates>& cost, int64_t now_ms) {
  registry::UsageQuery query;
  query.by = grouping_of(options.by);
  query.since_ms = period.since_ms;
  query.until_ms = period.until_ms;
  query.now_ms = now_ms;
  Result<std::vector<registry::UsageRow>> rows = registry::usage(db, query);
  if (!rows) return fail(rows.error());
  bool any_gpu = false, any_slot = false;
  for (const registry::UsageRow& row : *rows) {
    any_gpu = any_gpu || row.gpu_hours > 0;
    any_slot = any_slot || row.slot_hours > 0;
  }
  if (options.json) {
    nlohmann::json out = {{"by", options.by}, {"since", options.since.empty() ? nullptr : nlohmann::json(options.since)},
                          {"until", options.until.empty() ? nullptr : nlohmann::json(options.until)},
                          {"registry", db.path()}, {"rows", nlohmann::json::array()}};
    if (cost) out["currency"] = cost->currency;
    for (const registry::UsageRow& row : *rows) {
      nlohmann::json line = {{options.by, row.group}, {"runs", row.runs}, {"gpu_hours", row.gpu_hours},
                             {"slot_hours", row.slot_hours}};
      if (cost) line["cost"] = cost_of(row, *cost);
      out["rows"].push_back(std::move(line));
    }
    std::printf("%s\n", out.dump(2).c_str());
    return 0;
  }
  if (options.csv) {
    std::printf("%s,runs,gpu_hours,slot_hours%s\n", options.by.c_str(), cost ? ",cost,currency" : "");
    for (const registry::UsageRow& row : *rows) {
      std::printf("%s,%lld,%.6f,%.6f", registry::csv_field(row.group).c_str(), static_cast<long long>(row.runs),
                  row.gpu_hours, row.slot_hours);
      if (cost) std::printf(",%.2f,%s", cost_of(row, *cost), registry::csv_field(cost->currency).c_str());
      std::printf("\n");
    }
    return 0;
  }
  // Say which unit: a GPU-hour is one GPU held for an hour; on hosts without GPUs, a slot-hour
  // is one worker slot held for an hour.
  const char* unit = any_gpu && any_slot ? "GPU-hours and slot-hours (CPU hosts)"
                     : any_slot          ? "slot-hours (CPU hosts: worker slots held, no GPUs)"
                                         : "GPU-hours";
  std::printf("%s by %s, %s", unit, options.by.c_str(), period_text(options).c_str());
  if (cost) {
    std::printf("; cost at %.2f %s per GPU-hour", cost->per_gpu_hour, cost->currency.c_str());
    if (any_slot) std::printf(", %.4g %s per slot-hour", cost->per_slot_hour, cost->currency.c_str());
  }
  std::printf("\n");
  if (rows->empty()) {
    std::printf("no allocations in this period\n");
    return 0;
  }
  bool gpu_column = any_gpu || !any_slot;
  std::string cost_header = cost ? "COST (" + cost->currency + ")" : "";
  std::printf("%-24s %6s", options.by.c_str(), "RUNS");
  if (gpu_column) std::printf(" %12s", "GPU-HOURS");
  if (any_slot) std::printf(" %12s", "SLOT-HOURS");
  if (cost) std::printf(" %14s", cost_header.c_str());
  std::printf("\n");
  registry::UsageRow total{"total", 0, 0, 0};
  auto print_row = [&](const registry::UsageRow& row, const std::string& runs) {
    std::printf("%-24s %6s", row.group.empty() ? "(none)" : row.group.c_str(), runs.c_str());
    if (gpu_column) std::printf(" %12.2f", row.gpu_hours);
    if (any_slot) std::printf(" %12.2f", row.slot_hours);
    if (cost) std::printf(" %14.2f", cost_of(row, *cost));
    std::printf("\n");
  };
  for (const registry::UsageRow& row : *rows) {
    print_row(row, std::to_string(row.runs));
    total.gpu_hours += row.gpu_hours;
    total.slot_hours += row.slot_hours;
  }
  print_row(total, "");
  return 0;
}

int show_capacity(const UsageOptions& options, const registry::Period& period, registry::RegistryDb& db, int64_t now_ms) {
  registry::CapacityQuery query;
  query.now_ms = now_ms;
  query.until_ms = period.until_ms.value_or(now_ms);
  query.since_ms = period.since_ms.value_or(registry::day_start_ms(std::min(query.until_ms, now_ms) - 1) -
                                            (kDefaultCapacityDays - 1) * kDayMs);
  Result<registry::CapacityReport> report = registry::capacity(db, query);
  if (!report) return fail(report.error());
  std::string since_text = options.since.empty() ? registry::day_of(query.since_ms) : options.since;
  std::string until_text = options.until.empty() ? std::string("now") : options.until;
  if (options.json) {
    nlohmann::json out = {{"since", since_text}, {"until", options.until.empty() ? nullptr : nlohmann::json(options.until)},
                          {"registry", db.path()},
                          {"capacity_is", "the most units the host held in one allocation (the registry has no inventory)"},
                          {"days", nlohmann::json::array()}, {"standing_out", nlohmann::json::array()},
                          {"standing_out_rule", {{"min_unit_hours", query.min_unit_hours},
                                                 {"min_root_cause_failures", query.min_failures},
                                                 {"factor_over_median", query.factor_over_median}}},
                          {"compared_gpu_hosts", report->compared_gpu_hosts},
                          {"compared_slot_hosts", report->compared_slot_hosts}};
    for (const registry::CapacityDay& day : report->days) {
      out["days"].push_back({{"host", day.host}, {"day", day.day}, {"resource", day.resource}, {"capacity", day.capacity},
                             {"hours", day.hours}, {"busy_unit_hours", day.busy_unit_hours},
                             {"idle_unit_hours", day.idle_unit_hours}, {"busy_fraction", day.busy_fraction}});
    }
    for (const registry::StandingOutHost& host : report->standing_out) {
      out["standing_out"].push_back({{"host", host.host}, {"resource", host.resource}, {"unit_hours", host.unit_hours},
                                     {"root_cause_failures", host.root_cause_failures},
                                     {"per_1000_unit_hours", host.per_1000_hours},
                                     {"median_per_1000_unit_hours", host.median_per_1000_hours}});
    }
    std::printf("%s\n", out.dump(2).c_str());
    return 0;
  }
  std::printf("Capacity by host and day, %s to %s (UTC)\n", since_text.c_str(), until_text.c_str());
  std::printf("CAPACITY: the most GPUs (or worker slots) the host held in one allocation; the registry has no\n"
              "inventory. BUSY and IDLE are unit-hours (GPU-hours, slot-hours); BUSY over 100 %% means runs shared it.\n");
  if (report->days.empty()) {
    std::printf("no hosts in the registry yet\n");
  } else {
    int host_width = 4;
    for (const registry::CapacityDay& day : report->days) host_width = std::max(host_width, static_cast<int>(day.host.size()));
    std::printf("%-*s %-10s %-4s %8s %6s %10s %10s %7s\n", host_width, "HOST", "DAY", "UNIT", "CAPACITY", "HOURS", "BUSY", "IDLE",
                "BUSY %");
    for (const registry::CapacityDay& day : report->days) {
      std::printf("%-*s %-10s %-4s %8d %6.1f %10.2f %10.2f %6.1f%%\n", host_width, day.host.c_str(), day.day.c_str(),
                  day.resource == "gpu" ? "GPU" : "slot", day.capacity, day.hours, day.busy_unit_hours,
                  day.idle_unit_hours, 100.0 * day.busy_fraction);
    }
  }
  std::printf("\nHosts whose failure rate stands out (root-cause failures per 1,000 unit-hours above %.0fx the median\n"
              "of the %d GPU and %d CPU hosts that held at least %.0f unit-hours, with at least %d such failures):\n",
              query.factor_over_median, report->compared_gpu_hosts, report->compared_slot_hosts, query.min_unit_hours,
              query.min_failures);
  if (report->standing_out.empty()) std::printf("none\n");
  for (const registry::StandingOutHost& host : report->standing_out) {
    std::printf("%s: %d root-cause failures in %.1f %s: %.2f per 1,000 (median %.2f); see dtrain hosts --reliability\n",
                host.host.c_str(), host.root_cause_failures, host.unit_hours,
                host.resource == "gpu" ? "GPU-hours" : "slot-hours", host.per_1000_hours, host.median_per_1000_hours);
  }
  return 0;
}

int run_usage(const UsageOptions& options) {
  Result<registry::Period> period = registry::parse_period(options.since, options.until);
  if (!period) return fail(period.error());
  // Prices are optional: no config file, or one without `cost:`, is a report without a cost.
  Result<spec::SiteConfig> config = spec::load_site_config(spec::site_config_path(dtrain_home()));
  if (!config) return fail(config.error());
  Result<registry::RegistryDb> db = registry::RegistryDb::open(registry::registry_path(), false);
  if (!db) return fail(db.error());
  int64_t now_ms = SystemClock().wall_ms();
  if (options.capacity) return show_capacity(options, *period, *db, now_ms);
  return show_usage(options, *period, *db, config->cost, now_ms);
}

}  // namespace

void add_usage_command(CLI::App& app, CommandContext& context) {
  auto options = std::make_shared<UsageOptions>();
  CLI::App* command = app.add_subcommand(
      "usage", "GPU-hours (slot-hours on CPU hosts) and their cost by tenant, user, host or month, or the capacity "
               "hint per host and day, from the run registry");
  auto* by = command->add_option("--by", options->by, "Group by tenant, user, host or month (default tenant)")
                 ->check(CLI::IsMember({"tenant", "user", "host", "month"}));
  command->add_option("--since", options->since, "Count from this UTC date on (YYYY-MM-DD or YYYY-MM)");
  command->add_option("--until", options->until, "Count up to this UTC date, exclusive (YYYY-MM-DD or YYYY-MM)");
  auto* json_flag = command->add_flag("--json", options->json, "Print JSON");
  auto* csv_flag = command->add_flag("--csv", options->csv, "Print CSV")->excludes(json_flag);
  command->add_flag("--capacity", options->capacity,
                    "Busy and idle GPU-hours (slot-hours) per host per UTC day (default: the last 7 days), and the "
                    "hosts whose failure rate stands out")
      ->excludes(by)
      ->excludes(csv_flag);
  command->callback([options, &context] { context.exit_code = run_usage(*options); });
}

}  // namespace dtrain::cli
