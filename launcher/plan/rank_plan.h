#pragma once
// Rank layout: world = DP × PP × TP over the hosts' slots. Ranks are ordered TP fastest, then
// DP, then PP (Megatron order), and placed on hosts in order so that a TP group never crosses a
// host when it fits in one. Pure functions: the supervisor calls make_plan again after losing
// hosts, and `dtrain plan --without` shows the user exactly that plan.

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "launcher/base/result.h"
#include "launcher/spec/job_spec.h"

namespace dtrain::plan {

/// Where one rank runs and its coordinates.
struct RankSlot {
  int rank = 0;
  int host_index = 0;   ///< index into RankPlan::hosts (GROUP_RANK)
  std::string host;
  int local_rank = 0;
  int dp = 0, pp = 0, tp = 0;
};

struct PlanHost {
  spec::HostEntry entry;
  int slots_used = 0;
  std::vector<int> ranks;
};

struct RankPlan {
  int world_size = 0;
  int tensor = 1, pipeline = 1, data = 1;
  int global_batch = 0;   ///< 0 when the spec sets none
  int micro_batch = 0;
  int grad_accum = 1;     ///< global_batch / (micro_batch × data)
  std::vector<PlanHost> hosts;            ///< hosts that run ranks, in order
  std::vector<RankSlot> ranks;            ///< index == rank
  std::vector<std::vector<int>> tp_groups, pp_groups, dp_groups;
  std::vector<std::string> without;       ///< hosts left out (lost or excluded)
  std::vector<std::string> spares_used;   ///< spares that replaced them
  std::vector<std::string> notes;         ///< "dropped 1 data-parallel replica: grad_accum 2 → 3"
};

/// Plans `spec` without the hosts in `without` (lost/excluded), taking spares to replace them
/// first; when none are left, drops whole DP replicas (if elastic.min_hosts allows) and raises
/// grad accumulation to keep the global batch. Errors say why no plan is possible.
Result<RankPlan> make_plan(const spec::JobSpec& spec, const std::vector<std::string>& without = {});

nlohmann::json to_json(const RankPlan& plan);
/// Hosts, rank table, groups and batch arithmetic, for `dtrain plan` and supervisor.log.
std::string to_text(const RankPlan& plan);
/// One line: "world 6 → 4, data 3 → 2, grad_accum 2 → 3, hosts −gpu02".
std::string diff_text(const RankPlan& before, const RankPlan& after);

}  // namespace dtrain::plan
