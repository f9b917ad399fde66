// `dtrain history [--tenant T] [--user U] [--state S] [--since D] [--until D] [--limit N]
// [--json|--csv]`: the runs in the registry, newest submitted first, with who ran them, how long,
// the GPU-hours (slot-hours) they held, their failures and why they ended. See
// man/dtrain-registry.1.

#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "launcher/base/clock.h"
#include "launcher/base/duration.h"
#include "launcher/base/exit_code.h"
#include "launcher/registry/registry_db.h"
#include "launcher/registry/registry_queries.h"
#include "launcher/registry/registry_usage.h"

namespace dtrain::cli {
namespace {

struct HistoryOptions {
  std::optional<std::string> tenant;
  std::optional<std::string> user;
  std::optional<std::string> state;
  std::string since;
  std::string until;
  int limit = 50;
  bool json = false;
  bool csv = false;
};

int fail(const Error& error) {
  std::fprintf(stderr, "dtrain history: %s\n", error.message.c_str());
  return exit_code_for(error);
}

/// "45s", "6h30m", "1d02h": how long a run held its hosts ("-" while it holds them).
std::string duration_text(const std::optional<int64_t>& duration_ms) {
  return duration_ms ? format_duration(Millis(*duration_ms), DurationStyle::elapsed) : "-";
}

std::string tenant_text(const registry::RunRow& run) { return run.tenant.empty() ? "(none)" : run.tenant; }

nlohmann::json optional_time(const std::optional<int64_t>& wall_ms) {
  return wall_ms ? nlohmann::json(format_timestamp_utc(*wall_ms)) : nlohmann::json(nullptr);
}

nlohmann::json to_json(const registry::HistoryRow& row) {
  const registry::RunRow& run = row.run;
  return {{"id", run.id},
          {"submitted", format_timestamp_utc(run.submitted_ms)},
          {"started", optional_time(run.started_ms)},
          {"ended", optional_time(run.ended_ms)},
          {"user", run.user},
          {"tenant", run.tenant},
          {"name", run.name},
          {"state", run.state},
          {"duration_s", row.duration_ms ? nlohmann::json(*row.duration_ms / 1000.0) : nlohmann::json(nullptr)},
          {"gpu_hours", row.gpu_hours},
          {"slot_hours", row.slot_hours},
          {"failures", row.failures},
          {"root_cause_failures", row.root_cause_failures},
          {"exit_code", run.exit_code ? nlohmann::json(*run.exit_code) : nlohmann::json(nullptr)},
          {"exit_reason", run.exit_reason},
          {"run_dir", run.run_dir}};
}

int show_history(const HistoryOptions& options) {
  Result<registry::Period> period = registry::parse_period(options.since, options.until);
  if (!period) return fail(period.error());
  Result<registry::RegistryDb> db = registry::RegistryDb::open(registry::registry_path(), false);
  if (!db) return fail(db.error());
  registry::HistoryQuery query;
  query.tenant = options.tenant;
  query.user = options.user;
  query.state = options.state;
  query.since_ms = period->since_ms;
  query.until_ms = period->until_ms;
  query.limit = options.limit;
  query.now_ms = SystemClock().wall_ms();
  Result<registry::HistoryPage> page = registry::history(*db, query);
  if (!page) return fail(page.error());
  if (options.json) {
    nlohmann::json out = {{"registry", db->path()}, {"matching", page->matching}, {"runs", nlohmann::json::array()}};
    for (const registry::HistoryRow& row : page->rows) out["runs"].push_back(to_json(row));
    std::printf("%s\n", out.dump(2).c_str());
    return 0;
  }
  if (options.csv) {
    std::printf("id,submitted,user,tenant,name,state,duration_s,gpu_hours,slot_hours,failures,root_cause_failures,"
                "exit_code,exit_reason\n");
    for (const registry::HistoryRow& row : page->rows) {
      const registry::RunRow& run = row.run;
      std::printf("%s,%s,%s,%s,%s,%s,%s,%.6f,%.6f,%d,%d,%s,%s\n", registry::csv_field(run.id).c_str(),
                  format_timestamp_utc(run.submitted_ms).c_str(), registry::csv_field(run.user).c_str(),
                  registry::csv_field(run.tenant).c_str(), registry::csv_field(run.name).c_str(),
                  registry::csv_field(run.state).c_str(),
                  row.duration_ms ? std::to_string(*row.duration_ms / 1000).c_str() : "", row.gpu_hours,
                  row.slot_hours, row.failures, row.root_cause_failures,
                  run.exit_code ? std::to_string(*run.exit_code).c_str() : "",
                  registry::csv_field(run.exit_reason).c_str());
    }
    return 0;
  }
  if (page->rows.empty()) {
    std::printf("no runs match\n");
    return 0;
  }
  bool any_gpu = false, any_slot = false;
  for (const registry::HistoryRow& row : page->rows) {
    any_gpu = any_gpu || row.gpu_hours > 0;
    any_slot = any_slot || row.slot_hours > 0;
  }
  bool gpu_column = any_gpu || !any_slot;
  // Columns as wide as their longest value: run ids and names vary by site.
  auto width = [&](const char* header, std::string (*field)(const registry::RunRow&)) {
    size_t widest = std::string(header).size();
    for (const registry::HistoryRow& row : page->rows) widest = std::max(widest, field(row.run).size());
    return static_cast<int>(widest);
  };
  int id_width = width("RUN", [](const registry::RunRow& run) { return run.id; });
  int user_width = width("USER", [](const registry::RunRow& run) { return run.user; });
  int tenant_width = width("TENANT", [](const registry::RunRow& run) { return tenant_text(run); });
  int name_width = width("NAME", [](const registry::RunRow& run) { return run.name; });
  int state_width = width("STATE", [](const registry::RunRow& run) { return run.state; });
  // FAILURES is root causes / all: a cascade (a rank that died because another did) is counted,
  // not blamed.
  std::printf("%-*s %-19s %-*s %-*s %-*s %-*s %9s", id_width, "RUN", "SUBMITTED (UTC)", user_width, "USER", tenant_width,
              "TENANT", name_width, "NAME", state_width, "STATE", "DURATION");
  if (gpu_column) std::printf(" %10s", "GPU-HOURS");
  if (any_slot) std::printf(" %10s", "SLOT-HOURS");
  std::printf(" %8s  %s\n", "FAILURES", "EXIT REASON");
  for (const registry::HistoryRow& row : page->rows) {
    const registry::RunRow& run = row.run;
    std::printf("%-*s %-19s %-*s %-*s %-*s %-*s %9s", id_width, run.id.c_str(),
                registry::format_time_utc(run.submitted_ms).c_str(), user_width, run.user.c_str(), tenant_width,
                tenant_text(run).c_str(), name_width, run.name.c_str(), state_width, run.state.c_str(),
                duration_text(row.duration_ms).c_str());
    if (gpu_column) std::printf(" %10.2f", row.gpu_hours);
    if (any_slot) std::printf(" %10.2f", row.slot_hours);
    std::string failures = std::to_string(row.root_cause_failures) + "/" + std::to_string(row.failures);
    std::printf(" %8s  %s\n", failures.c_str(), run.exit_reason.empty() ? "-" : run.exit_reason.c_str());
  }
  if (static_cast<int64_t>(page->rows.size()) < page->matching) {
    std::printf("%zu of %lld matching runs, newest first; --limit 0 shows all\n", page->rows.size(),
                static_cast<long long>(page->matching));
  }
  return 0;
}

}  // namespace

void add_history_command(CLI::App& app, CommandContext& context) {
  auto options = std::make_shared<HistoryOptions>();
  CLI::App* command = app.add_subcommand(
      "history", "Runs from the run registry, newest first: who, when, how long, GPU-hours, failures, exit reason");
  command->add_option("--tenant", options->tenant, "Only this tenant's runs (\"\" for runs without one)");
  command->add_option("--user", options->user, "Only this user's runs");
  command->add_option("--state", options->state, "Only runs in this state (succeeded, failed, stopped, running, ...)");
  command->add_option("--since", options->since, "Submitted on or after this UTC date (YYYY-MM-DD or YYYY-MM)");
  command->add_option("--until", options->until, "Submitted before this UTC date (YYYY-MM-DD or YYYY-MM)");
  command->add_option("--limit", options->limit, "Show the newest N (default 50; 0: all)")->check(CLI::NonNegativeNumber);
  auto* json_flag = command->add_flag("--json", options->json, "Print JSON");
  command->add_flag("--csv", options->csv, "Print CSV")->excludes(json_flag);
  command->callback([options, &context] { context.exit_code = show_history(*options); });
}

}  // namespace dtrain::cli
