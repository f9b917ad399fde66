#pragma once
// How a change of rank plan is told, in one vocabulary: the plan.changed event and `dtrain plan
// --without` (launcher/plan: RankPlan) and `dtrain status` (launcher/runlog: plan-<gen>.json read
// back) say it with the same words. It lives in base because both modules use it and neither
// may use the other; each reduces its plan to a PlanShape.

#include <string>
#include <vector>

namespace dtrain {

/// What a plan change is told from.
struct PlanShape {
  /// A host that runs ranks, with (rank, tp, pp, dp) of each of its ranks in rank order.
  struct Host {
    struct Rank {
      int rank = 0, tp = 0, pp = 0, dp = 0;
    };
    std::string name;
    std::vector<Rank> ranks;
  };
  int world_size = 0;
  int data = 1, pipeline = 1, tensor = 1;
  int global_batch = 0, micro_batch = 0, grad_accum = 1;
  std::vector<Host> hosts;               ///< in plan order
  std::vector<std::string> without;      ///< hosts left out (lost or excluded)
  std::vector<std::string> spares_used;  ///< spares that replaced them
};

/// A PlanShape with the sizes and host lists of `plan`, which names them as PlanShape does
/// (plan::RankPlan, PlanRecord); the caller adds the hosts.
template <class Plan>
PlanShape plan_shape_sizes(const Plan& plan) {
  PlanShape shape;
  shape.world_size = plan.world_size;
  shape.data = plan.data;
  shape.pipeline = plan.pipeline;
  shape.tensor = plan.tensor;
  shape.global_batch = plan.global_batch;
  shape.micro_batch = plan.micro_batch;
  shape.grad_accum = plan.grad_accum;
  shape.without = plan.without;
  shape.spares_used = plan.spares_used;
  return shape;
}

/// A plan change in words: `size` is "shrunk from 6 to 4 ranks", "grew from 4 to 6 ranks" or
/// "still 6 ranks"; `details` are, in this order, "host gpu02 excluded" (or "hosts a, b
/// excluded", past nine "hosts a, ... h and 12 more excluded": newly left out, and running ranks
/// before), "spare gpu09 in use", where each new host runs ("gpu09 takes gpu02's place:
/// ranks 2–3 at (tp,pp,dp) (0,0,1) (1,0,1)"), then each size that changed ("data 3 → 2",
/// "pipeline", "tensor", "micro batch", "grad_accum", "global batch").
struct PlanChangeText {
  std::string size;
  std::vector<std::string> details;
  bool world_changed = false;
};

PlanChangeText describe_plan_change(const PlanShape& before, const PlanShape& after);

/// One line, details separated by "; ": "shrunk from 6 to 4 ranks; host gpu02 excluded; data
/// 3 → 2; grad_accum 2 → 3" (the size only when it changed); "no change" when nothing did.
std::string plan_change_line(const PlanShape& before, const PlanShape& after);

}  // namespace dtrain
