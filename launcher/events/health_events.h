#pragma once
// The host-health event (issue 29 "health gates"): host.health, what a host's agent found when it
// checked the host (at hello, before a re-rendezvous took it in, after a failure blamed on it)
// and what the run did about it. The checks' wire form is the agent protocol's
// (launcher/proto/host_health.h); here each check is a name, a verdict and a message, which every
// reader (status, the report, the registry's quarantine, Prometheus) shows without knowing which
// checks exist. Included by events.h.

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "launcher/base/result.h"
#include "launcher/events/event_catalogue.h"

namespace dtrain::events {

/// One check of a host: {"checkpoint dir", "fail", "write + fsync did not finish within 5s: ..."}.
struct HealthCheckResult {
  static constexpr const char* kOk = "ok";
  static constexpr const char* kWarn = "warn";
  static constexpr const char* kFail = "fail";
  std::string name{};
  std::string verdict{};  ///< ok, warn or fail
  std::string message{};
  nlohmann::json to_json() const;
  static Result<HealthCheckResult> from_json(const nlohmann::json& object);
  bool operator==(const HealthCheckResult&) const = default;
};

/// host.health: one host's checks at one moment, and what the run did.
struct HostHealth {
  static constexpr const char* name = kHostHealth;
  static constexpr const char* kAdmitted = "admitted";  ///< action: no check failed
  static constexpr const char* kLeftOut = "left out";   ///< action: a check failed; the host is not used
  static constexpr const char* kUnchecked = "unchecked";  ///< action: no answer could be read; admitted
  // The moments, as the agent protocol names them (proto::health_moment; a test holds them equal).
  static constexpr const char* kStart = "start";
  static constexpr const char* kJoin = "join";
  static constexpr const char* kAfterFailure = "after failure";
  std::string host{};
  std::string moment{};   ///< start, join, after failure (proto::health_moment)
  std::string verdict{};  ///< the worst check's: ok, warn or fail
  std::string action{};
  std::vector<HealthCheckResult> checks{};
  int64_t ms = 0;         ///< how long the checks took on the host
  std::string detail{};   ///< one sentence: what failed (or warned) and what the run did
  /// The checks with that verdict, "name: message; name: message".
  std::string summary(const std::string& of) const;
  nlohmann::json to_json() const;
  static Result<HostHealth> from_json(const nlohmann::json& event);
  bool operator==(const HostHealth&) const = default;
};

/// dtrain status's health lines: "ok on 3 hosts" (those with nothing to say), then one line per
/// host that warned, failed or was not checked: "h2 fail (start), left out: network ports: ...".
std::vector<std::string> health_lines(const std::vector<HostHealth>& hosts);

/// host.quarantined: the run found a host bad enough to keep out of later runs (a failed health
/// check, or the root cause of health.quarantine.after failures within its window). The registry
/// takes it in (launcher/registry: the quarantine table); every later run's plan leaves the host
/// out until it is released or `duration_ms` has passed (then on probation: its next health
/// check decides).
struct HostQuarantined {
  static constexpr const char* name = kHostQuarantined;
  std::string host{};
  std::string reason{};                ///< one sentence: why
  std::vector<std::string> evidence{}; ///< the failed checks' messages, or the failures' causes
  int64_t duration_ms = 0;             ///< health.quarantine.for
  nlohmann::json to_json() const;
  static Result<HostQuarantined> from_json(const nlohmann::json& event);
  bool operator==(const HostQuarantined&) const = default;
};

/// One host that plan.quarantined names: why the registry holds it and until when (ISO 8601 UTC).
struct QuarantinedHost {
  std::string host{};
  std::string reason{};
  std::string until{};
  nlohmann::json to_json() const;
  static Result<QuarantinedHost> from_json(const nlohmann::json& object);
  bool operator==(const QuarantinedHost&) const = default;
};

/// plan.quarantined: the hosts of the run's host list that the registry held in quarantine when
/// the run was planned (submit, run, resume), left out the way a host not in the list is. Written
/// once per plan that left one out, so the run log says why a host of the list never took part.
struct PlanQuarantined {
  static constexpr const char* name = kPlanQuarantined;
  std::vector<QuarantinedHost> hosts{};
  nlohmann::json to_json() const;
  static Result<PlanQuarantined> from_json(const nlohmann::json& event);
  bool operator==(const PlanQuarantined&) const = default;
};

}  // namespace dtrain::events
