#include "launcher/run/quarantine_gate.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>

#include "launcher/base/strings.h"
#include "launcher/registry/registry_db.h"

namespace dtrain::run {

namespace {

std::string source_text(const registry::QuarantineRow& row) {
  return row.source == registry::kManualQuarantine ? "by hand" : "by run " + printable(row.source);
}

}  // namespace

std::vector<std::string> QuarantineGate::hosts() const {
  std::vector<std::string> names;
  for (const registry::QuarantineRow& row : left_out) names.push_back(row.host);
  return names;
}

events::PlanQuarantined QuarantineGate::event() const {
  events::PlanQuarantined event;
  for (const registry::QuarantineRow& row : left_out) {
    event.hosts.push_back({row.host, row.reason, registry::quarantine_time_text(row.until_ms)});
  }
  return event;
}

std::vector<std::string> QuarantineGate::lines() const {
  std::vector<std::string> lines;
  for (const registry::QuarantineRow& row : left_out) {
    // The registry's text reaches a terminal: printable() (a reason copied from a run log may hold anything).
    std::string host = printable(row.host);
    lines.push_back("left out " + host + ": quarantined " + source_text(row) + " until " +
                    registry::quarantine_time_text(row.until_ms) + ": " + printable(row.reason) +
                    "; `dtrain hosts release " + host + "` brings it back");
  }
  return lines;
}

QuarantineGate read_quarantine_gate(const spec::JobSpec& spec, const std::string& registry_file, int64_t now_ms) {
  QuarantineGate gate;
  struct stat info {};
  // No registry yet: nothing was ever quarantined (and a plan must not create one).
  if (::stat(registry_file.c_str(), &info) != 0 && errno == ENOENT) return gate;
  Result<registry::RegistryDb> db = registry::RegistryDb::open(registry_file, false);
  Result<std::vector<registry::QuarantineRow>> active =
      db ? registry::active_quarantines(*db, now_ms) : Result<std::vector<registry::QuarantineRow>>(db.error());
  if (!active) {
    gate.warning = "quarantined hosts not checked, every host of the spec is planned (the registry cannot be read: " +
                   active.error().message + ")";
    return gate;
  }
  std::vector<spec::HostEntry> listed = spec.hosts;
  listed.insert(listed.end(), spec.spares.begin(), spec.spares.end());
  for (const spec::HostEntry& host : listed) {
    auto held = std::find_if(active->begin(), active->end(),
                             [&](const registry::QuarantineRow& row) { return row.host == host.name; });
    bool seen = std::any_of(gate.left_out.begin(), gate.left_out.end(),
                            [&](const registry::QuarantineRow& row) { return row.host == host.name; });
    if (held != active->end() && !seen) gate.left_out.push_back(*held);
  }
  return gate;
}

Result<plan::RankPlan> plan_without_quarantined(const spec::JobSpec& spec, const QuarantineGate& gate) {
  Result<plan::RankPlan> plan = plan::make_plan(spec, gate.hosts());
  if (plan || gate.left_out.empty()) return plan;
  std::vector<std::string> held;
  for (const registry::QuarantineRow& row : gate.left_out) {
    held.push_back(printable(row.host) + " (" + printable(row.reason) + ", until " +
                   registry::quarantine_time_text(row.until_ms) + ")");
  }
  return Error::user("quarantined in the registry: " + join(held, "; ") + ": " + plan.error().message +
                     "; `dtrain hosts release " + printable(gate.left_out.front().host) +
                     "` (with --reason) brings a host back");
}

void print_quarantine_gate(const QuarantineGate& gate, const std::string& command) {
  if (gate.warning) std::fprintf(stderr, "%s: warning: %s\n", command.c_str(), gate.warning->c_str());
  for (const std::string& line : gate.lines()) std::fprintf(stderr, "%s: %s\n", command.c_str(), line.c_str());
}

registry::QuarantineRule quarantine_rule_of(const spec::HealthSettings& health) {
  return {health.quarantine_after, health.quarantine_window.count(), health.quarantine_duration.count()};
}

}  // namespace dtrain::run
