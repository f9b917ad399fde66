#pragma once
// The worker environment of one generation (DESIGN.md §3), built from the plan: the
// torchrun-compatible variables and dtrain's own. Pure, so tests can check every variable.

#include <map>
#include <string>

#include "launcher/plan/rank_plan.h"
#include "launcher/spec/job_spec.h"

namespace dtrain::run {

using EnvMap = std::map<std::string, std::string>;

struct GenerationContext {
  std::string run_id;
  int generation = 0;
  int restart_count = 0;
  int64_t resume_step = -1;
  std::string master_addr;   ///< rank 0's host as the other hosts reach it
  int master_port = 0;
  std::string backend;       ///< "gloo" or "nccl" (auto already resolved)
  std::string checkpoint_dir;
  std::string extra_path;    ///< prepended to PATH (directory of dtrain, where dtrain-train lives)
  bool omp_threads_set = false;  ///< OMP_NUM_THREADS already set by the user
};

/// Variables common to every worker of the generation (spec worker.env included).
EnvMap common_worker_env(const spec::JobSpec& spec, const plan::RankPlan& plan,
                         const GenerationContext& context);

/// Variables of one rank (RANK, LOCAL_RANK, GROUP_RANK, DTRAIN_DP_RANK, ...).
EnvMap rank_worker_env(const plan::RankPlan& plan, const plan::RankSlot& slot);

}  // namespace dtrain::run
