// `dtrain usage [--by tenant|user|host|month] [--since DATE] [--until DATE] [--json|--csv]`:
// GPU-hours (slot-hours on hosts without GPUs) from the run registry's allocations, counted only
// inside the period and split at month boundaries. Reads $DTRAIN_HOME/registry.db; when it is
// missing, says to build it with `dtrain registry rebuild`. See man/dtrain-registry.1.

#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <tuple>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "launcher/base/exit_code.h"
#include "launcher/registry/registry_db.h"
#include "launcher/registry/registry_usage.h"

namespace dtrain::cli {
namespace {

struct UsageOptions {
  std::string by = "tenant";
  std::string since;
  std::string until;
  bool json = false;
  bool csv = false;
};

registry::UsageGrouping grouping_of(const std::string& by) {
  if (by == "user") return registry::UsageGrouping::user;
  if (by == "host") return registry::UsageGrouping::host;
  if (by == "month") return registry::UsageGrouping::month;
  return registry::UsageGrouping::tenant;
}

/// CSV field: quoted when it holds a comma, quote or newline (tenant names are free text).
std::string csv_field(const std::string& text) {
  if (text.find_first_of(",\"\n") == std::string::npos) return text;
  std::string quoted = "\"";
  for (char c : text) quoted += (c == '"') ? std::string("\"\"") : std::string(1, c);
  return quoted + "\"";
}

int show_usage(const UsageOptions& options) {
  registry::UsageQuery query;
  query.by = grouping_of(options.by);
  query.now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                     std::chrono::system_clock::now().time_since_epoch()).count();
  for (auto [text, bound, flag] : {std::tuple{&options.since, &query.since_ms, "--since"},
                                   std::tuple{&options.until, &query.until_ms, "--until"}}) {
    if (text->empty()) continue;
    *bound = registry::parse_date_utc(*text);
    if (!*bound) {
      std::fprintf(stderr, "dtrain usage: %s '%s' is not a date; use YYYY-MM-DD or YYYY-MM (UTC)\n", flag,
                   text->c_str());
      return to_int(ExitCode::usage);
    }
  }
  if (query.since_ms && query.until_ms && *query.until_ms <= *query.since_ms) {
    std::fprintf(stderr, "dtrain usage: --until %s is not after --since %s\n", options.until.c_str(),
                 options.since.c_str());
    return to_int(ExitCode::usage);
  }
  Result<registry::RegistryDb> db = registry::RegistryDb::open(registry::registry_path(), false);
  if (!db) {
    std::fprintf(stderr, "dtrain usage: %s\n", db.error().message.c_str());
    return exit_code_for(db.error());
  }
  Result<std::vector<registry::UsageRow>> rows = registry::usage(*db, query);
  if (!rows) {
    std::fprintf(stderr, "dtrain usage: %s\n", rows.error().message.c_str());
    return exit_code_for(rows.error());
  }
  bool any_gpu = false, any_slot = false;
  for (const registry::UsageRow& row : *rows) {
    any_gpu = any_gpu || row.gpu_hours > 0;
    any_slot = any_slot || row.slot_hours > 0;
  }
  std::string period = (options.since.empty() ? std::string("the beginning") : options.since) + " to " +
                       (options.until.empty() ? std::string("now") : options.until) + " (UTC)";
  if (options.json) {
    nlohmann::json out = {{"by", options.by}, {"since", options.since.empty() ? nullptr : nlohmann::json(options.since)},
                          {"until", options.until.empty() ? nullptr : nlohmann::json(options.until)},
                          {"registry", db->path()}, {"rows", nlohmann::json::array()}};
    for (const registry::UsageRow& row : *rows) {
      out["rows"].push_back({{options.by, row.group}, {"runs", row.runs}, {"gpu_hours", row.gpu_hours},
                             {"slot_hours", row.slot_hours}});
    }
    std::printf("%s\n", out.dump(2).c_str());
    return 0;
  }
  if (options.csv) {
    std::printf("%s,runs,gpu_hours,slot_hours\n", options.by.c_str());
    for (const registry::UsageRow& row : *rows) {
      std::printf("%s,%lld,%.6f,%.6f\n", csv_field(row.group).c_str(), static_cast<long long>(row.runs),
                  row.gpu_hours, row.slot_hours);
    }
    return 0;
  }
  // Say which unit: a GPU-hour is one GPU held for an hour; on hosts without GPUs, a slot-hour
  // is one worker slot held for an hour.
  const char* unit = any_gpu && any_slot ? "GPU-hours and slot-hours (CPU hosts)"
                     : any_slot          ? "slot-hours (CPU hosts: worker slots held, no GPUs)"
                                         : "GPU-hours";
  std::printf("%s by %s, %s\n", unit, options.by.c_str(), period.c_str());
  if (rows->empty()) {
    std::printf("no allocations in this period\n");
    return 0;
  }
  std::printf("%-24s %6s", options.by.c_str(), "RUNS");
  if (any_gpu || !any_slot) std::printf(" %12s", "GPU-HOURS");
  if (any_slot) std::printf(" %12s", "SLOT-HOURS");
  std::printf("\n");
  double total_gpu = 0, total_slot = 0;
  for (const registry::UsageRow& row : *rows) {
    std::printf("%-24s %6lld", row.group.empty() ? "(none)" : row.group.c_str(), static_cast<long long>(row.runs));
    if (any_gpu || !any_slot) std::printf(" %12.2f", row.gpu_hours);
    if (any_slot) std::printf(" %12.2f", row.slot_hours);
    std::printf("\n");
    total_gpu += row.gpu_hours;
    total_slot += row.slot_hours;
  }
  std::printf("%-24s %6s", "total", "");
  if (any_gpu || !any_slot) std::printf(" %12.2f", total_gpu);
  if (any_slot) std::printf(" %12.2f", total_slot);
  std::printf("\n");
  return 0;
}

}  // namespace

void add_usage_command(CLI::App& app, CommandContext& context) {
  auto options = std::make_shared<UsageOptions>();
  CLI::App* command = app.add_subcommand(
      "usage", "GPU-hours (slot-hours on CPU hosts) by tenant, user, host or month, from the run registry");
  command->add_option("--by", options->by, "Group by tenant, user, host or month (default tenant)")
      ->check(CLI::IsMember({"tenant", "user", "host", "month"}));
  command->add_option("--since", options->since, "Count from this UTC date on (YYYY-MM-DD or YYYY-MM)");
  command->add_option("--until", options->until, "Count up to this UTC date, exclusive (YYYY-MM-DD or YYYY-MM)");
  auto* json_flag = command->add_flag("--json", options->json, "Print JSON");
  command->add_flag("--csv", options->csv, "Print CSV")->excludes(json_flag);
  command->callback([options, &context] { context.exit_code = show_usage(*options); });
}

}  // namespace dtrain::cli
