#pragma once
// The registry's quarantine at planning time (issue 29): `dtrain plan`, submit, run and resume
// read the active quarantines and plan without the spec's hosts (and spares) that they hold —
// make_plan's `without`, the same as a host that is gone: a spare takes its place, else the job
// shrinks (elastic.min_hosts), else the plan is refused with the hosts, the reasons and the fix.
// Advisory: a registry that cannot be read is a warning and every host is planned; a missing
// registry holds no quarantine. An expired quarantine is not read here (probation: the host is
// planned, and its start health check decides).

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "launcher/base/result.h"
#include "launcher/events/health_events.h"
#include "launcher/plan/rank_plan.h"
#include "launcher/registry/registry_quarantine.h"
#include "launcher/spec/job_spec.h"

namespace dtrain::run {

struct QuarantineGate {
  /// The spec's hosts and spares that an active quarantine holds, in the spec's order.
  std::vector<registry::QuarantineRow> left_out;
  /// Set when the registry could not be read: say it, and plan every host.
  std::optional<std::string> warning;

  std::vector<std::string> hosts() const;
  /// plan.quarantined for the run log (written when left_out is not empty).
  events::PlanQuarantined event() const;
  /// One line per host left out: "left out h2: quarantined until 2026-12-12T08:00:00Z (run
  /// r-1): failed its health check (start); `dtrain hosts release h2` brings it back".
  std::vector<std::string> lines() const;
};

/// The active quarantines (at now_ms) of `registry_file` that hold a host of `spec`.
QuarantineGate read_quarantine_gate(const spec::JobSpec& spec, const std::string& registry_file, int64_t now_ms);

/// The plan without the gate's hosts. When leaving them out makes the plan impossible, the error
/// (kind user: exit 2) names them, why each is quarantined, and `dtrain hosts release HOST`.
Result<plan::RankPlan> plan_without_quarantined(const spec::JobSpec& spec, const QuarantineGate& gate);

/// Prints the gate's warning or lines to stderr as `command` ("dtrain submit").
void print_quarantine_gate(const QuarantineGate& gate, const std::string& command);

/// The spec's health.quarantine as the registry's cross-run rule reads it.
registry::QuarantineRule quarantine_rule_of(const spec::HealthSettings& health);

}  // namespace dtrain::run
