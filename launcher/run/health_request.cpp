#include "launcher/run/health_request.h"

namespace dtrain::run {

std::optional<proto::HealthRequest> health_request(const spec::JobSpec& spec) {
  const spec::HealthSettings& health = spec.health;
  if (!health.enabled) return std::nullopt;
  proto::HealthRequest request;
  if (!spec.checkpoint.dir.empty()) request.checkpoint_dir = spec.checkpoint.dir;
  if (!spec.hosts.empty()) request.master_addr = spec.hosts.front().name;
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

}  // namespace dtrain::run
