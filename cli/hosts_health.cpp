#include "cli/hosts_health.h"

#include <cstdio>

#include <algorithm>

#include <nlohmann/json.hpp>

#include "cli/hosts_stack.h"

#include "launcher/base/json_fields.h"
#include "launcher/base/strings.h"
#include "launcher/base/version.h"
#include "launcher/run/health_request.h"

namespace dtrain::cli {

namespace {

/// The "key value" line of the facts script's output, or "".
std::string line_value(const std::string& output, const std::string& key) {
  for (const std::string& line : split(output, '\n')) {
    if (starts_with(line, key + " ")) return line.substr(key.size() + 1);
  }
  return "";
}

}  // namespace

std::optional<proto::HealthRequest> hosts_health_request(const spec::JobSpec& job) {
  // Before a run there is no run directory: only a checkpoint.dir the spec names is probed.
  std::optional<proto::HealthRequest> request = run::health_request(job, job.checkpoint.dir);
  if (!request) return std::nullopt;
  request->reclaim_wait_ms = 0;
  request->command_timeout_ms = std::min(request->command_timeout_ms, kHostsHealthCommandTimeoutMs);
  return request;
}

std::string health_script_part(const spec::JobSpec& job) {
  std::optional<proto::HealthRequest> request = hosts_health_request(job);
  if (!request) return "";
  std::string wanted = std::string("dtrain ") + kVersion;
  // $s: the stack part's choice of dtrain when it ran; the same lookup otherwise (consistency: off).
  return "h=" + shell_quote(json_compact(proto::to_json(*request))) + "\n" + this_dtrain_script_lines() +
         "if [ -n \"$s\" ]; then echo \"health $(\"$s\" agent --health-probe \"$h\" 2>/dev/null | head -c 262144 | tr -d '\\n')\"; "
         "else echo \"health_none no " + wanted + " there yet (it is copied at submit): not checked\"; fi\n";
}

HostHealth read_host_health(const spec::JobSpec& job, const std::string& host, const std::string& output) {
  HostHealth health;
  if (!job.health.enabled || output.empty()) return health;
  std::string text = line_value(output, "health");
  if (text.empty()) {
    std::string why = line_value(output, "health_none");
    health.verdict = "unknown";
    health.warnings.push_back(host + ": health " + (why.empty() ? std::string("its dtrain printed no health report") : why));
    return health;
  }
  Result<proto::HealthReport> report = proto::parse_health_report(nlohmann::json::parse(text, nullptr, false), "health");
  if (!report) {
    health.verdict = "unknown";
    health.warnings.push_back(host + ": its health report could not be read: " + report.error().message);
    return health;
  }
  for (const proto::HealthCheck& check : report->checks) {
    std::string line = host + ": " + printable(check.name, proto::kMaxHealthNameBytes) + ": " +
                       printable(check.message, proto::kMaxHealthMessageBytes);
    if (check.verdict == proto::HealthVerdict::fail) health.problems.push_back(line + " (a run keeps this host out)");
    if (check.verdict == proto::HealthVerdict::warn) health.warnings.push_back(line);
  }
  proto::HealthVerdict worst = report->verdict();
  health.verdict = worst == proto::HealthVerdict::fail ? "FAIL" : proto::to_string(worst);
  health.report = std::move(*report);
  return health;
}

std::vector<std::string> health_check_lines(const std::string& host, const proto::HealthReport& report) {
  std::vector<std::string> lines;
  for (const proto::HealthCheck& check : report.checks) {
    std::string verdict = check.verdict == proto::HealthVerdict::fail ? "FAIL" : proto::to_string(check.verdict);
    char prefix[160];
    std::snprintf(prefix, sizeof prefix, "%-16s %-5s %-22s ", host.c_str(), verdict.c_str(),
                  printable(check.name, proto::kMaxHealthNameBytes).c_str());
    lines.push_back(prefix + printable(check.message, proto::kMaxHealthMessageBytes));
  }
  if (report.checks.empty()) lines.push_back(host + "  (nothing to check on this host)");
  return lines;
}

}  // namespace dtrain::cli
