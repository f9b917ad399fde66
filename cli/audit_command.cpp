// `dtrain audit [--run R] [--actor A] [--action X] [--since D] [--until D] [--limit N] [--json]`:
// who did what to which run, from the registry's append-only audit table, oldest first (the
// order things happened; --limit keeps the newest N). Submit, stop, resume, drill and a submit
// over quota write it; secrets in arguments are redacted before they get there. See
// man/dtrain-registry.1.

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

namespace dtrain::cli {
namespace {

struct AuditOptions {
  std::optional<std::string> run_id;
  std::optional<std::string> actor;
  std::optional<std::string> action;
  std::string since;
  std::string until;
  int limit = 100;
  bool json = false;
};

int fail(const Error& error) {
  std::fprintf(stderr, "dtrain audit: %s\n", error.message.c_str());
  return exit_code_for(error);
}

int show_audit(const AuditOptions& options) {
  Result<registry::Period> period = registry::parse_period(options.since, options.until);
  if (!period) return fail(period.error());
  Result<registry::RegistryDb> db = registry::RegistryDb::open(registry::registry_path(), false);
  if (!db) return fail(db.error());
  registry::AuditQuery query;
  query.run_id = options.run_id;
  query.actor = options.actor;
  query.action = options.action;
  query.since_ms = period->since_ms;
  query.until_ms = period->until_ms;
  query.limit = options.limit;
  Result<std::vector<registry::AuditRow>> rows = registry::audit_log(*db, query);
  if (!rows) return fail(rows.error());
  if (options.json) {
    nlohmann::json out = {{"registry", db->path()}, {"rows", nlohmann::json::array()}};
    for (const registry::AuditRow& row : *rows) {
      out["rows"].push_back({{"time", format_timestamp_utc(row.at_ms)}, {"actor", row.actor}, {"action", row.action},
                             {"run", row.run_id}, {"target", row.target}, {"arguments", row.arguments},
                             {"result", row.result}});
    }
    std::printf("%s\n", out.dump(2).c_str());
    return 0;
  }
  if (rows->empty()) {
    std::printf("no audit rows match\n");
    return 0;
  }
  auto shown = [](const std::string& text) { return text.empty() ? std::string("-") : text; };
  // Columns as wide as their longest value; ARGUMENTS, the longest, last.
  auto width = [&](const char* header, std::string registry::AuditRow::*field) {
    size_t widest = std::string(header).size();
    for (const registry::AuditRow& row : *rows) widest = std::max(widest, shown(row.*field).size());
    return static_cast<int>(widest);
  };
  int actor = width("ACTOR", &registry::AuditRow::actor);
  int action = width("ACTION", &registry::AuditRow::action);
  int run = width("RUN", &registry::AuditRow::run_id);
  int target = width("TARGET", &registry::AuditRow::target);
  int result = width("RESULT", &registry::AuditRow::result);
  std::printf("%-19s %-*s %-*s %-*s %-*s %-*s %s\n", "TIME (UTC)", actor, "ACTOR", action, "ACTION", run, "RUN", target,
              "TARGET", result, "RESULT", "ARGUMENTS");
  for (const registry::AuditRow& row : *rows) {
    std::printf("%-19s %-*s %-*s %-*s %-*s %-*s %s\n", registry::format_time_utc(row.at_ms).c_str(), actor,
                row.actor.c_str(), action, row.action.c_str(), run, shown(row.run_id).c_str(), target,
                shown(row.target).c_str(), result, shown(row.result).c_str(), shown(row.arguments).c_str());
  }
  if (options.limit > 0 && static_cast<int>(rows->size()) == options.limit) {
    std::printf("the newest %d rows; --limit 0 shows all\n", options.limit);
  }
  return 0;
}

}  // namespace

void add_audit_command(CLI::App& app, CommandContext& context) {
  auto options = std::make_shared<AuditOptions>();
  CLI::App* command = app.add_subcommand(
      "audit", "Who submitted, stopped, resumed or drilled which run, from the registry's append-only audit table");
  command->add_option("--run", options->run_id, "Only this run's rows");
  command->add_option("--actor", options->actor, "Only this person's rows (either side of a sudo)");
  command->add_option("--action", options->action, "Only this action (submit, stop, resume, drill, ...)");
  command->add_option("--since", options->since, "From this UTC date on (YYYY-MM-DD or YYYY-MM)");
  command->add_option("--until", options->until, "Before this UTC date (YYYY-MM-DD or YYYY-MM)");
  command->add_option("--limit", options->limit, "The newest N rows, still oldest first (default 100; 0: all)")
      ->check(CLI::NonNegativeNumber);
  command->add_flag("--json", options->json, "Print JSON");
  command->callback([options, &context] { context.exit_code = show_audit(*options); });
}

}  // namespace dtrain::cli
