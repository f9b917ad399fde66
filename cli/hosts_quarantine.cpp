#include "cli/hosts_quarantine.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "launcher/base/clock.h"
#include "launcher/base/duration.h"
#include "launcher/base/exit_code.h"
#include "launcher/base/identity.h"
#include "launcher/base/strings.h"
#include "launcher/registry/audit_trail.h"
#include "launcher/registry/registry_db.h"
#include "launcher/registry/registry_quarantine.h"
#include "launcher/runlog/run_directory.h"

namespace dtrain::cli {
namespace {

struct QuarantineOptions {
  std::string host;
  std::string reason;
  std::string duration = "7d";
};

struct ReleaseOptions {
  std::string host;
  std::string reason;
};

int failure(const std::string& command, const Error& error) {
  std::fprintf(stderr, "%s: %s\n", command.c_str(), error.message.c_str());
  return exit_code_for(error);
}

/// "7d", "36h", "90m": parse_duration's units, and days, which quarantines are counted in.
Result<Millis> parse_quarantine_duration(const std::string& text) {
  Result<Millis> duration = Error::user("");
  if (!text.empty() && text.back() == 'd') {
    Result<Millis> hours = parse_duration(text.substr(0, text.size() - 1) + "h");
    if (hours) duration = Millis(hours->count() * 24);
  } else {
    duration = parse_duration(text);
  }
  if (!duration || duration->count() <= 0) {
    return Error::user("--for: '" + text + "' is not a duration; write e.g. 7d, 36h or 90m");
  }
  // Until stays a time a registry row (and a person) can hold; for longer, quarantine again.
  constexpr int64_t kLongestMs = 3650LL * 24 * 3600 * 1000;
  if (duration->count() > kLongestMs) return Error::user("--for: '" + text + "' is longer than 3650d, the most it takes");
  return duration;
}

/// The registry a change is written to, created (with $DTRAIN_HOME) when there is none yet.
Result<registry::RegistryDb> open_for_change() {
  if (Status made = make_directories(dtrain_home()); !made) return made.error();
  return registry::RegistryDb::open(registry::registry_path(), true);
}

/// The audit row of a change; its failure is a warning (the change is made).
void audit(const std::string& command, const std::string& action, const std::string& host, nlohmann::json arguments,
           const std::string& result) {
  Status recorded = registry::record_audit(registry::registry_path(), {action, "", host, std::move(arguments), result});
  if (!recorded) {
    std::fprintf(stderr, "%s: warning: the audit table was not updated (%s)\n", command.c_str(),
                 recorded.error().message.c_str());
  }
}

int quarantine_host(const QuarantineOptions& options) {
  const std::string command = "dtrain hosts quarantine";
  if (trim(options.reason).empty()) {
    return failure(command, Error::user("--reason is required: say why " + options.host + " is kept out (it is shown "
                                        "to everyone whose plan leaves the host out, and audited)"));
  }
  Result<Millis> duration = parse_quarantine_duration(options.duration);
  if (!duration) return failure(command, duration.error());
  Result<registry::RegistryDb> db = open_for_change();
  if (!db) return failure(command, db.error());
  int64_t now = SystemClock().wall_ms();
  registry::QuarantineRow row;
  row.host = options.host;
  row.reason = options.reason;
  row.evidence = nlohmann::json::array({"quarantined by hand by " + audit_actor()});
  row.since_ms = now;
  row.until_ms = now + duration->count();
  row.source = registry::kManualQuarantine;
  if (Status inserted = registry::insert_quarantine(*db, row); !inserted) return failure(command, inserted.error());
  std::string until = registry::quarantine_time_text(row.until_ms);
  audit(command, "hosts quarantine", options.host, {{"reason", options.reason}, {"for", options.duration}},
        "quarantined until " + until);
  std::printf("%s quarantined until %s: every later plan leaves it out; `dtrain hosts release %s` brings it back\n",
              printable(options.host).c_str(), until.c_str(), printable(options.host).c_str());
  return to_int(ExitCode::ok);
}

int release_host(const ReleaseOptions& options) {
  const std::string command = "dtrain hosts release";
  Result<registry::RegistryDb> db = open_for_change();
  if (!db) return failure(command, db.error());
  Result<int> released =
      registry::release_quarantine(*db, options.host, SystemClock().wall_ms(), audit_actor(), options.reason);
  if (!released) return failure(command, released.error());
  std::string result = *released > 0 ? "released" : "not quarantined";
  audit(command, "hosts release", options.host, {{"reason", options.reason}}, result);
  if (*released == 0) {
    std::printf("%s was not quarantined: nothing to release\n", printable(options.host).c_str());
  } else {
    std::printf("%s released: later plans use it again (its start health check decides)\n",
                printable(options.host).c_str());
  }
  return to_int(ExitCode::ok);
}

std::string source_text(const registry::QuarantineRow& row) {
  return row.source == registry::kManualQuarantine ? "manual" : "run " + row.source;
}

int list_quarantined(bool json) {
  const std::string command = "dtrain hosts --quarantined";
  std::vector<registry::QuarantineRow> active;
  std::string path = registry::registry_path();
  // No registry yet: nothing was ever quarantined (a listing creates no file).
  if (std::filesystem::exists(path)) {
    Result<registry::RegistryDb> db = registry::RegistryDb::open(path, false);
    if (!db) return failure(command, db.error());
    Result<std::vector<registry::QuarantineRow>> read = registry::active_quarantines(*db, SystemClock().wall_ms());
    if (!read) return failure(command, read.error());
    active = std::move(*read);
  }
  if (json) {
    nlohmann::json hosts = nlohmann::json::array();
    for (const registry::QuarantineRow& row : active) {
      hosts.push_back({{"host", row.host}, {"since", registry::quarantine_time_text(row.since_ms)},
                       {"until", registry::quarantine_time_text(row.until_ms)}, {"reason", row.reason},
                       {"source", row.source}, {"evidence", row.evidence}});
    }
    nlohmann::json out = {{"registry", path}, {"hosts", std::move(hosts)}};
    std::printf("%s\n", out.dump(2, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    return to_int(ExitCode::ok);
  }
  if (active.empty()) {
    std::printf("no host is quarantined\n");
    return to_int(ExitCode::ok);
  }
  int host_width = 4, source_width = 6;
  for (const registry::QuarantineRow& row : active) {
    host_width = std::max(host_width, static_cast<int>(row.host.size()));
    source_width = std::max(source_width, static_cast<int>(source_text(row).size()));
  }
  std::printf("%-*s %-20s %-20s %-*s %s\n", host_width, "HOST", "SINCE (UTC)", "UNTIL (UTC)", source_width, "SOURCE",
              "REASON");
  for (const registry::QuarantineRow& row : active) {
    std::printf("%-*s %-20s %-20s %-*s %s\n", host_width, printable(row.host).c_str(),
                registry::quarantine_time_text(row.since_ms).c_str(), registry::quarantine_time_text(row.until_ms).c_str(),
                source_width, printable(source_text(row)).c_str(), printable(row.reason).c_str());
  }
  return to_int(ExitCode::ok);
}

}  // namespace

std::function<std::optional<int>(bool json)> add_hosts_quarantine_commands(CLI::App& hosts, CommandContext& context) {
  auto quarantine = std::make_shared<QuarantineOptions>();
  CLI::App* quarantine_command = hosts.add_subcommand(
      "quarantine", "keep HOST out of every later plan (a spare or a shrink takes its place) until released or --for "
                    "has passed; audited");
  quarantine_command->add_option("host", quarantine->host, "the host, as job specs name it")->required();
  quarantine_command->add_option("--reason", quarantine->reason, "why (shown by every plan that leaves it out)")->required();
  quarantine_command->add_option("--for", quarantine->duration, "how long: 7d (the default), 36h, 90m")
      ->capture_default_str();
  quarantine_command->callback([quarantine, &context] { context.exit_code = quarantine_host(*quarantine); });

  auto release = std::make_shared<ReleaseOptions>();
  CLI::App* release_command = hosts.add_subcommand(
      "release", "let a quarantined HOST back into plans (exit 0 with a note if it was not quarantined); audited");
  release_command->add_option("host", release->host, "the host")->required();
  release_command->add_option("--reason", release->reason, "why (kept in the registry and the audit table)");
  release_command->callback([release, &context] { context.exit_code = release_host(*release); });

  auto listing = std::make_shared<bool>(false);
  hosts.add_flag("--quarantined", *listing,
                 "no spec: the hosts the registry holds in quarantine (host, since, until, reason, source)");
  return [quarantine_command, release_command, listing, &context](bool json) -> std::optional<int> {
    if (quarantine_command->parsed() || release_command->parsed()) return context.exit_code;
    if (*listing) return list_quarantined(json);
    return std::nullopt;
  };
}

}  // namespace dtrain::cli
