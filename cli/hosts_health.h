#pragma once
// `dtrain hosts`' health checks (issue 29): the facts script's part that asks each host's dtrain
// to check its host as an agent would before the first generation (`dtrain agent --health-probe`,
// the agent's own checks, launcher/agent/health_checks.h), and the reading of what came back.

#include <optional>
#include <string>
#include <vector>

#include "launcher/proto/host_health.h"
#include "launcher/spec/job_spec.h"

namespace dtrain::cli {

/// Longest a site command may run in the preflight: the local facts script has 30 s in all.
inline constexpr int64_t kHostsHealthCommandTimeoutMs = 20'000;

/// The request the preflight sends: the run's (run::health_request), except that it does not
/// wait for leftover GPU memory to be freed (a preflight reports what is there now) and bounds
/// the site command by kHostsHealthCommandTimeoutMs. None with health.enabled: false.
std::optional<proto::HealthRequest> hosts_health_request(const spec::JobSpec& job);

/// Shell lines for the facts script (after the stack part, which sets $s to a dtrain of this
/// version when it found one): one "health <json>" line, or "health_none <why>". "" with
/// health.enabled: false.
std::string health_script_part(const spec::JobSpec& job);

/// One host's health as the preflight read it.
struct HostHealth {
  std::string verdict = "-";  ///< ok, warn, FAIL, unknown (no report), - (not checked)
  std::optional<proto::HealthReport> report;
  std::vector<std::string> problems;  ///< the failed checks ("host: check: message")
  std::vector<std::string> warnings;  ///< warned checks, and a report that could not be read
};

/// Reads the host's "health" line from the facts script's output ("" for a host that was not
/// reached: not checked).
HostHealth read_host_health(const spec::JobSpec& job, const std::string& host, const std::string& output);

/// The checks per host, for under the table: "  host  verdict  check  message" lines.
std::vector<std::string> health_check_lines(const std::string& host, const proto::HealthReport& report);

}  // namespace dtrain::cli
