#include "launcher/run/health_request.h"

#include <algorithm>

#include "worker/contract/env.h"

namespace dtrain::run {

namespace env = contract::env;

namespace {

std::optional<std::string> master_to_check(const spec::JobSpec& spec) {
  if (auto user = spec.worker.env.find(env::kMasterAddr); user != spec.worker.env.end() && !user->second.empty()) {
    return user->second;
  }
  if (spec.hosts.empty()) return std::nullopt;
  // The same choice as master_address(): a pod's IP, since pod names resolve only inside it.
  if (!spec.hosts.front().address.empty()) return spec.hosts.front().address;
  if (!spec.hosts.front().is_local()) return spec.hosts.front().name;
  bool all_local = std::all_of(spec.hosts.begin(), spec.hosts.end(), [](const spec::HostEntry& host) {
    return host.is_local();
  });
  if (all_local) return std::string("127.0.0.1");
  return std::nullopt;
}

}  // namespace

std::optional<proto::HealthRequest> health_request(const spec::JobSpec& spec, const std::string& checkpoint_dir) {
  const spec::HealthSettings& health = spec.health;
  if (!health.enabled) return std::nullopt;
  proto::HealthRequest request;
  if (!checkpoint_dir.empty()) request.checkpoint_dir = checkpoint_dir;
  request.master_addr = master_to_check(spec);
  request.command = health.command;
  request.command_timeout_ms = health.command_timeout.count();
  request.diagnose = health.diagnose;
  request.diagnose_timeout_ms = health.diagnose_timeout.count();
  request.leftover_gpu_memory_mb = static_cast<int64_t>(health.leftover_gpu_memory_mb);
  request.reclaim_wait_ms = health.reclaim_wait.count();
  request.write_timeout_ms = health.write_timeout.count();
  request.min_free_mb = static_cast<int64_t>(health.min_free_mb);
  return request;
}

proto::HealthCheck clock_offset_check(int64_t offset_ms) {
  std::string offset = (offset_ms >= 0 ? "+" : "") + std::to_string(offset_ms) + " ms";
  if (offset_ms > kClockOffsetWarnMs || offset_ms < -kClockOffsetWarnMs) {
    return {"clock offset", proto::HealthVerdict::warn,
            "the host's clock is " + offset + " off the launch host's: failures across hosts are ordered by time in "
            "the run log; fix: run chrony or ntpd on every host"};
  }
  return {"clock offset", proto::HealthVerdict::ok, offset + " from the launch host's clock"};
}

}  // namespace dtrain::run
