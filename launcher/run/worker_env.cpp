#include "launcher/run/worker_env.h"

#include <cstdio>
#include <string>
#include <vector>

#include "worker/contract/env.h"

namespace dtrain::run {

namespace env = contract::env;

EnvMap common_worker_env(const spec::JobSpec& spec, const plan::RankPlan& plan,
                         const GenerationContext& context) {
  EnvMap vars = spec.worker.env;
  auto set = [&](const char* name, const auto& value) {
    if constexpr (std::is_convertible_v<decltype(value), std::string>) vars[name] = value;
    else vars[name] = std::to_string(value);
  };
  set(env::kWorldSize, plan.world_size);
  set(env::kGroupWorldSize, static_cast<int>(plan.hosts.size()));
  set(env::kRoleWorldSize, plan.world_size);
  if (!spec.worker.env.count(env::kRoleName)) set(env::kRoleName, std::string("default"));  // dtrain run --role
  set(env::kMasterAddr, context.master_addr);
  set(env::kMasterPort, context.master_port);
  set(env::kRestartCount, context.restart_count);
  set(env::kMaxRestarts, spec.elastic.max_restarts);
  set(env::kRunIdTorch, context.run_id);
  if (!context.omp_threads_set && !spec.worker.env.count(env::kOmpNumThreads)) {
    set(env::kOmpNumThreads, std::string("1"));
  }
  set(env::kRunId, context.run_id);
  set(env::kGeneration, context.generation);
  set(env::kBackend, context.backend);
  set(env::kDpSize, plan.data);
  set(env::kTpSize, plan.tensor);
  set(env::kPpSize, plan.pipeline);
  set(env::kGlobalBatch, plan.global_batch);
  set(env::kMicroBatch, plan.micro_batch);
  set(env::kGradAccum, plan.grad_accum);
  set(env::kCkptDir, context.checkpoint_dir);
  set(env::kCkptInterval, spec.checkpoint.interval_steps);
  set(env::kCkptKeep, spec.checkpoint.keep);
  char file_mode[8];
  std::snprintf(file_mode, sizeof file_mode, "%04o", static_cast<unsigned>(spec.checkpoint.file_mode));
  set(env::kCkptFileMode, std::string(file_mode));
  set(env::kResumeStep, context.resume_step);
  set(env::kHeartbeatIntervalMs, static_cast<long long>(spec.heartbeat.interval.count()));
  if (spec.elastic.in_place) {
    set(env::kInPlace, std::string("1"));
    set(env::kInPlaceTimeoutMs, static_cast<long long>(spec.in_place_timeout().count()));
  }
  // PATH is not set here: each host's agent builds it from its own environment (the host's
  // PATH, conda, modules) with its dtrain's directory in front (launcher/agent/worker_process.h,
  // worker_search_path). A PATH from the spec's worker.env passes through as the base.
  return vars;
}

EnvMap rank_worker_env(const plan::RankPlan& plan, const plan::RankSlot& slot) {
  EnvMap vars;
  vars[env::kRank] = std::to_string(slot.rank);
  vars[env::kRoleRank] = std::to_string(slot.rank);
  vars[env::kLocalRank] = std::to_string(slot.local_rank);
  vars[env::kGroupRank] = std::to_string(slot.host_index);
  vars[env::kLocalWorldSize] =
      std::to_string(plan.hosts.at(static_cast<size_t>(slot.host_index)).ranks.size());
  vars[env::kDpRank] = std::to_string(slot.dp);
  vars[env::kTpRank] = std::to_string(slot.tp);
  vars[env::kPpRank] = std::to_string(slot.pp);
  return vars;
}

EnvMap device_worker_env(const spec::JobSpec& spec, const plan::RankPlan& plan, const plan::RankSlot& slot,
                         bool visible_devices) {
  EnvMap vars;
  vars[env::kDevice] = std::to_string(slot.slot);
  if (!visible_devices || spec.worker.env.count(env::kCudaVisibleDevices)) return vars;
  const plan::PlanHost& host = plan.hosts.at(static_cast<size_t>(slot.host_index));
  // Ordered by LOCAL_RANK, so that position i is the GPU of the host's local rank i.
  std::vector<int> devices(host.ranks.size(), -1);
  for (int rank : host.ranks) {
    const plan::RankSlot& peer = plan.ranks.at(static_cast<size_t>(rank));
    if (peer.local_rank >= 0 && peer.local_rank < static_cast<int>(devices.size())) {
      devices[static_cast<size_t>(peer.local_rank)] = peer.slot;
    }
  }
  std::string list;
  for (int device : devices) {
    if (device < 0) continue;
    list += (list.empty() ? "" : ",") + std::to_string(device);
  }
  vars[env::kCudaVisibleDevices] = list;
  return vars;
}

std::string master_address(const spec::JobSpec& spec, const plan::RankPlan& plan, const MasterAddressFacts& facts) {
  if (auto user = spec.worker.env.find(env::kMasterAddr); user != spec.worker.env.end() && !user->second.empty()) {
    return user->second;
  }
  const spec::HostEntry& rank0 = plan.hosts.at(static_cast<size_t>(plan.ranks.at(0).host_index)).entry;
  bool remote_hosts = false;
  for (const plan::PlanHost& host : plan.hosts) remote_hosts = remote_hosts || !host.entry.is_local();
  if (!rank0.address.empty()) return rank0.address;  // a pod: its IP (pod names resolve only inside)
  if (!rank0.is_local()) return rank0.name;
  if (!remote_hosts) return "127.0.0.1";
  if (facts.launch_hostname_routable && !facts.launch_hostname.empty()) return facts.launch_hostname;
  if (!facts.ssh_source_address.empty()) return facts.ssh_source_address;
  return facts.launch_hostname.empty() ? "127.0.0.1" : facts.launch_hostname;
}

std::optional<proto::StackProbeRequest> stack_probe_request(const spec::JobSpec& spec) {
  if (spec.consistency == spec::Consistency::off || spec.worker.command.empty()) return std::nullopt;
  proto::StackProbeRequest request;
  request.argv = spec.worker.command;
  if (!spec.worker.workdir.empty()) request.workdir = spec.worker.workdir;
  // Only what decides which interpreter, packages and libraries the worker finds: never the
  // rest of worker.env (secrets among it), which `dtrain hosts` would put on a command line.
  for (const auto& [name, value] : spec.worker.env) {
    if (name.rfind("PYTHON", 0) == 0 || name == "PATH" || name == "LD_LIBRARY_PATH" || name == "VIRTUAL_ENV" ||
        name == "CONDA_PREFIX" || name == "CUDA_HOME" || name == "HOME" || name == "DTRAIN_IMAGE_DIGEST") {
      request.env[name] = value;
    }
  }
  return request;
}

}  // namespace dtrain::run
