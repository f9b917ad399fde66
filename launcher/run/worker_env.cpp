#include "launcher/run/worker_env.h"

#include <cstdlib>

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
  set(env::kRoleName, std::string("default"));
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
  set(env::kResumeStep, context.resume_step);
  set(env::kHeartbeatIntervalMs, static_cast<long long>(spec.heartbeat.interval.count()));
  if (!context.extra_path.empty()) {
    std::string path = spec.worker.env.count("PATH") ? spec.worker.env.at("PATH")
                       : std::getenv("PATH")         ? std::getenv("PATH")
                                                     : "/usr/local/bin:/usr/bin:/bin";
    vars["PATH"] = context.extra_path + ":" + path;
  }
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

}  // namespace dtrain::run
