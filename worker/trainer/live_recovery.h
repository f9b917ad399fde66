#pragma once
// In-place recovery of dtrain-train (DTRAIN_IN_PLACE=1): after a rank failed and the survivors
// re-rendezvoused under the new generation (worker.h, adopt_new_generation), every rank —
// survivors and the replacement (DTRAIN_JOIN_LIVE=1) — must continue from the same step with
// the same parameters and optimizer state. This file is that agreement.
//
// A failure can interrupt a step half-way through its data-parallel allreduce: some survivors
// then completed step S (their allreduce finished and they stepped the optimizer) while others
// did not. Such a rank is one step ahead, never more (completing S+1 needs every peer's
// contribution to S+1, so every peer completed S). dtrain-train rolls it back to a copy of its
// state taken just before its last optimizer step (KeptState: "keep the pre-step state"): a
// copy of parameters and momentum is exact, whereas recomputing the step backwards
// (p += lr * v; v = (v - g) / momentum) is not in floating point, and the run must stay
// bit-identical to a fault-free one.
//
// The agreement, on every rank, over the new generation's store and data-parallel group:
//   1. publish "live/state/<rank>" = newest completed step (-1 for a replacement), the step of
//      the kept state, and the rank's (tp, pp, dp) coordinates; wait for every rank's;
//   2. target = the smallest completed step among ranks that have one; every rank decides the
//      same from the same reports (plan_agreement): a rank at target + 1 rolls back, and it is
//      an error, on every rank alike, when a rank is further ahead, when a rank one step ahead
//      kept no state of target, or when every replica of a shard is a replacement (then only a
//      checkpoint on disk has that shard: the worker exits and the supervisor restarts fully);
//   3. in each data-parallel group, the lowest dp index that has a state broadcasts parameters
//      and momentum to its group; everyone continues at target + 1, whose samples are fixed by
//      the step number, so the data order is the fault-free run's.

#include <cstdint>
#include <string>
#include <vector>

#include "worker/runtime/worker.h"
#include "worker/trainer/staging.h"

namespace dtrain::trainer {

/// The state before this rank's last optimizer step, kept to roll back one step.
class KeptState {
 public:
  /// `params` and `velocity` hold the state after step `step`, about to be updated by the
  /// optimizer for step + 1. Copies into buffers kept from the previous call: no allocation
  /// after the first.
  void keep(int64_t step, const std::vector<float>& params, const std::vector<float>& velocity);
  /// The step whose state is kept; -1: none.
  int64_t step() const { return step_; }
  /// Puts the kept state back (the caller checked step()).
  void restore_into(std::vector<float>& params, std::vector<float>& velocity) const;
  void forget() { step_ = -1; }

 private:
  int64_t step_ = -1;
  std::vector<float> params_;
  std::vector<float> velocity_;
};

/// What one rank publishes for the agreement.
struct RankReport {
  int rank = 0;
  int64_t completed = -1;  ///< newest completed step; -1: no state (a replacement)
  int64_t kept = -1;       ///< step of its KeptState; -1: none
  int tp = 0, pp = 0, dp = 0;
};

/// What every rank agreed on, seen from one rank.
struct AgreementPlan {
  int64_t step = 0;        ///< the state everyone continues from (the next step is step + 1)
  bool roll_back = false;  ///< this rank restores its kept state first
  int source_dp = 0;       ///< index in this rank's data-parallel group that broadcasts
  int source_rank = 0;     ///< that rank's global rank
};

/// The decision, from every rank's report (`reports[r]` is rank r's), for rank `my_rank`. Pure:
/// every rank computes the same target, and the same error when there is one.
worker::Result<AgreementPlan> plan_agreement(const std::vector<RankReport>& reports, int my_rank);

/// The whole agreement for this rank: publishes its report in `kv` (the new generation's
/// store), waits up to `timeout` for every rank's, rolls back if it must, and receives or sends
/// the state over `data` (its data-parallel group, staged). `completed` is -1 for a replacement.
/// On success `params` and `velocity` hold the state of plan.step, and `kept` is forgotten.
worker::Result<AgreementPlan> agree_on_state(worker::KvClient& kv, const worker::Topology& me, Staging& data,
                                             int64_t completed, KeptState& kept, std::vector<float>& params,
                                             std::vector<float>& velocity, worker::Millis timeout);

}  // namespace dtrain::trainer
