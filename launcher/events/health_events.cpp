// to_json and from_json of host.health (health_events.h).

#include "launcher/events/health_events.h"

#include "launcher/base/strings.h"
#include "launcher/events/event_fields.h"

namespace dtrain::events {

using nlohmann::json;
using detail::EventFields;
using detail::named;

json HealthCheckResult::to_json() const { return {{"name", name}, {"verdict", verdict}, {"message", message}}; }

Result<HealthCheckResult> HealthCheckResult::from_json(const json& object) {
  EventFields fields("health check", object);
  HealthCheckResult out;
  fields.read("name", out.name).read("verdict", out.verdict).read("message", out.message);
  return fields.result(std::move(out));
}

std::string HostHealth::summary(const std::string& of) const {
  std::vector<std::string> parts;
  for (const HealthCheckResult& check : checks) {
    if (check.verdict == of) parts.push_back(check.name + ": " + check.message);
  }
  return join(parts, "; ");
}

json HostHealth::to_json() const {
  json list = json::array();
  for (const HealthCheckResult& check : checks) list.push_back(check.to_json());
  return named(name, {{"host", host}, {"moment", moment}, {"verdict", verdict}, {"action", action},
                      {"checks", std::move(list)}, {"ms", ms}, {"detail", detail}});
}

Result<HostHealth> HostHealth::from_json(const json& object) {
  EventFields fields(name, object);
  HostHealth event;
  fields.read("host", event.host).read("moment", event.moment).read("verdict", event.verdict)
      .read("action", event.action).read("ms", event.ms).read("detail", event.detail);
  fields.read_each("checks", event.checks);
  return fields.result(std::move(event));
}

std::vector<std::string> health_lines(const std::vector<HostHealth>& hosts) {
  std::vector<std::string> lines;
  size_t healthy = 0;
  for (const HostHealth& host : hosts) {
    if (host.verdict == HealthCheckResult::kOk && host.action == HostHealth::kAdmitted) {
      ++healthy;
      continue;
    }
    std::string said = host.summary(host.verdict);
    lines.push_back(host.host + " " + host.verdict + " (" + host.moment + "), " + host.action + (said.empty() ? "" : ": " + said));
  }
  if (healthy > 0) {
    lines.insert(lines.begin(), "ok on " + std::to_string(healthy) + " host" + (healthy == 1 ? "" : "s"));
  }
  return lines;
}

json HostQuarantined::to_json() const {
  return named(name, {{"host", host}, {"reason", reason}, {"evidence", evidence}, {"duration_ms", duration_ms}});
}

Result<HostQuarantined> HostQuarantined::from_json(const json& object) {
  EventFields fields(name, object);
  HostQuarantined event;
  fields.read("host", event.host).read("reason", event.reason).read("evidence", event.evidence)
      .read("duration_ms", event.duration_ms);
  return fields.result(std::move(event));
}

json QuarantinedHost::to_json() const { return {{"host", host}, {"reason", reason}, {"until", until}}; }

Result<QuarantinedHost> QuarantinedHost::from_json(const json& object) {
  EventFields fields("quarantined host", object);
  QuarantinedHost out;
  fields.read("host", out.host).read("reason", out.reason).read("until", out.until);
  return fields.result(std::move(out));
}

json PlanQuarantined::to_json() const {
  json list = json::array();
  for (const QuarantinedHost& host : hosts) list.push_back(host.to_json());
  return named(name, {{"hosts", std::move(list)}});
}

Result<PlanQuarantined> PlanQuarantined::from_json(const json& object) {
  EventFields fields(name, object);
  PlanQuarantined event;
  fields.read_each("hosts", event.hosts);
  return fields.result(std::move(event));
}

}  // namespace dtrain::events
