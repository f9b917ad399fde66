#include "launcher/proto/host_health.h"

#include <algorithm>

#include "launcher/base/json_fields.h"
#include "launcher/base/strings.h"

namespace dtrain::proto {

using nlohmann::json;

namespace {

constexpr size_t kMaxPathBytes = 4096;
constexpr size_t kMaxCommandBytes = 16 << 10;
constexpr int64_t kMaxTimeoutMs = 3'600'000;
constexpr int64_t kMaxMegabytes = int64_t{1} << 40;
constexpr size_t kMaxMomentBytes = 32;

int severity(HealthVerdict verdict) { return static_cast<int>(verdict); }

}  // namespace

const char* to_string(HealthVerdict verdict) {
  switch (verdict) {
    case HealthVerdict::ok: return "ok";
    case HealthVerdict::warn: return "warn";
    case HealthVerdict::fail: return "fail";
  }
  return "ok";
}

Result<HealthVerdict> parse_health_verdict(const std::string& text) {
  if (text == "ok") return HealthVerdict::ok;
  if (text == "warn") return HealthVerdict::warn;
  if (text == "fail") return HealthVerdict::fail;
  return Error::user("expected ok, warn or fail, got '" + printable(text, 40) + "'");
}

HealthVerdict HealthReport::verdict() const {
  HealthVerdict worst = HealthVerdict::ok;
  for (const HealthCheck& check : checks) {
    if (severity(check.verdict) > severity(worst)) worst = check.verdict;
  }
  return worst;
}

std::string HealthReport::summary(HealthVerdict of) const {
  std::vector<std::string> parts;
  for (const HealthCheck& check : checks) {
    if (check.verdict == of) parts.push_back(check.name + ": " + check.message);
  }
  return join(parts, "; ");
}

json to_json(const HealthRequest& request) {
  json out = json::object();
  put_optional(out, "checkpoint_dir", request.checkpoint_dir);
  put_optional(out, "master_addr", request.master_addr);
  if (!request.command.empty()) out["command"] = request.command;
  out["command_timeout_ms"] = request.command_timeout_ms;
  if (!request.diagnose.empty()) out["diagnose"] = request.diagnose;
  out["diagnose_timeout_ms"] = request.diagnose_timeout_ms;
  out["leftover_gpu_memory_mb"] = request.leftover_gpu_memory_mb;
  out["reclaim_wait_ms"] = request.reclaim_wait_ms;
  out["write_timeout_ms"] = request.write_timeout_ms;
  out["min_free_mb"] = request.min_free_mb;
  return out;
}

json to_json(const HealthReport& report) {
  json checks = json::array();
  for (const HealthCheck& check : report.checks) {
    checks.push_back({{"name", check.name}, {"verdict", to_string(check.verdict)}, {"message", check.message}});
  }
  return {{"moment", report.moment}, {"checks", std::move(checks)}, {"ms", report.ms}};
}

Result<HealthRequest> parse_health_request(const json& object, const std::string& what) {
  FieldReader reader(what, object);
  HealthRequest request;
  request.checkpoint_dir = reader.optional_string("checkpoint_dir", kMaxPathBytes);
  request.master_addr = reader.optional_string("master_addr", 256);
  request.command = reader.optional_string("command", kMaxCommandBytes).value_or("");
  request.diagnose = reader.optional_string("diagnose", kMaxCommandBytes).value_or("");
  auto read_limit = [&](const char* key, int64_t min, int64_t max, int64_t& out) {
    if (auto value = reader.optional_integer(key, min, max)) out = *value;
  };
  read_limit("command_timeout_ms", 1, kMaxTimeoutMs, request.command_timeout_ms);
  read_limit("diagnose_timeout_ms", 1, kMaxTimeoutMs, request.diagnose_timeout_ms);
  read_limit("leftover_gpu_memory_mb", 0, kMaxMegabytes, request.leftover_gpu_memory_mb);
  read_limit("reclaim_wait_ms", 0, kMaxTimeoutMs, request.reclaim_wait_ms);
  read_limit("write_timeout_ms", 1, kMaxTimeoutMs, request.write_timeout_ms);
  read_limit("min_free_mb", 0, kMaxMegabytes, request.min_free_mb);
  if (!reader.ok()) return reader.error();
  return request;
}

Result<HealthReport> parse_health_report(const json& object, const std::string& what) {
  FieldReader reader(what, object);
  HealthReport report;
  report.moment = reader.string("moment", kMaxMomentBytes);
  report.ms = reader.optional_integer("ms", 0).value_or(0);
  if (const json* checks = reader.optional_array("checks")) {
    if (checks->size() > kMaxHealthChecks) {
      reader.fail_text("checks", "more than " + std::to_string(kMaxHealthChecks) + " checks");
    }
    for (size_t i = 0; reader.ok() && i < checks->size(); ++i) {
      FieldReader check_reader(what + ".checks[" + std::to_string(i) + "]", (*checks)[i]);
      HealthCheck check;
      check.name = check_reader.string("name", kMaxHealthNameBytes);
      std::string verdict = check_reader.string("verdict", 16);
      check.message = check_reader.optional_string("message", kMaxHealthMessageBytes).value_or("");
      if (check_reader.ok()) {
        Result<HealthVerdict> parsed = parse_health_verdict(verdict);
        if (!parsed) check_reader.fail_text("verdict", parsed.error().message);
        else check.verdict = *parsed;
      }
      if (!check_reader.ok()) return check_reader.error();
      report.checks.push_back(std::move(check));
    }
  }
  if (!reader.ok()) return reader.error();
  return report;
}

}  // namespace dtrain::proto
