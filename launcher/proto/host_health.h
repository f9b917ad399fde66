#pragma once
// Host health (issue 29 "health gates"): what the supervisor asks an agent to check of its host
// (config.health, once per connection, and the `health` request at the later moments) and what
// the agent answers (a `health` frame: once after hello, then one per request). One struct each
// way, one to_json and one non-throwing parser. The agent's checks are launcher/agent/health_checks.h; the supervisor's
// use of the answer (leave the host out, quarantine it) is launcher/supervisor/supervisor_health.cpp.
//
// Each check has a name ("gpu ecc", "checkpoint dir", "site command", ...), a verdict and one
// sentence that says what was found and how to fix it. A host is kept out only for a `fail`;
// `warn` lets it in with the message in the run log (a site command that timed out or printed
// garbage, a reading NVML could not give).

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "launcher/base/result.h"

namespace dtrain::proto {

/// Bounds on what an agent may send back.
inline constexpr size_t kMaxHealthChecks = 64;
inline constexpr size_t kMaxHealthNameBytes = 64;
inline constexpr size_t kMaxHealthMessageBytes = 2048;

/// When a check runs (the `moment` of a report).
namespace health_moment {
inline constexpr const char* kStart = "start";                 ///< at hello, before the first generation
inline constexpr const char* kJoin = "join";                   ///< before a re-rendezvous takes the host in (a spare, a rejoin)
inline constexpr const char* kAfterFailure = "after failure";  ///< the host was blamed for a failure
}  // namespace health_moment

enum class HealthVerdict { ok, warn, fail };
const char* to_string(HealthVerdict verdict);

/// config.health: which checks, with which limits. Times in ms, sizes in MiB.
struct HealthRequest {
  std::optional<std::string> checkpoint_dir{};  ///< written + fsynced, and its free space
  std::optional<std::string> master_addr{};     ///< the interface that reaches it must be up
  std::string command{};                        ///< the site's check (`sh -c`); "" none
  int64_t command_timeout_ms = 30'000;
  std::string diagnose{};                       ///< run with a check after a failure; "" none
  int64_t diagnose_timeout_ms = 300'000;
  int64_t leftover_gpu_memory_mb = 512;         ///< others' GPU memory allowed per GPU
  int64_t reclaim_wait_ms = 30'000;             ///< how long to wait for it to be freed
  int64_t write_timeout_ms = 5'000;             ///< the checkpoint directory's write + fsync
  int64_t min_free_mb = 1024;                   ///< free space in the checkpoint directory
  bool operator==(const HealthRequest&) const = default;
};

struct HealthCheck {
  std::string name{};
  HealthVerdict verdict = HealthVerdict::ok;
  std::string message{};
  bool operator==(const HealthCheck&) const = default;
};

/// The body of a `health` frame.
struct HealthReport {
  std::string moment = health_moment::kStart;
  std::vector<HealthCheck> checks{};
  int64_t ms = 0;  ///< how long the checks took on the host
  /// The worst verdict of the checks (ok when there are none).
  HealthVerdict verdict() const;
  /// The checks with that verdict, "name: message; name: message".
  std::string summary(HealthVerdict of) const;
  bool operator==(const HealthReport&) const = default;
};

nlohmann::json to_json(const HealthRequest& request);
nlohmann::json to_json(const HealthReport& report);
/// Never throw; the error names the field (`health.report.checks[2].verdict: ...`). `what` is the
/// member's place in its message ("config.health", "health.report").
Result<HealthRequest> parse_health_request(const nlohmann::json& object, const std::string& what);
Result<HealthReport> parse_health_report(const nlohmann::json& object, const std::string& what);
Result<HealthVerdict> parse_health_verdict(const std::string& text);

}  // namespace dtrain::proto
