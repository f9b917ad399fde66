#pragma once
// dtrain-train's training run, given a Worker: what main() does after parsing the flags. A
// library function so that unit tests can run several ranks as threads of one process
// (Worker::in_process over InProcessKv, real Gloo groups), in-place recovery included.

#include <cstdint>
#include <functional>

#include "worker/runtime/worker.h"
#include "worker/trainer/options.h"

namespace dtrain::trainer {

/// Test seams; dtrain-train sets none.
struct TrainingHooks {
  /// Asked on every rank after its step's forward and backward passes, before the
  /// data-parallel allreduce: true makes this rank stop there as if killed (its communicators
  /// are closed at once, nothing more is reported, train() returns kKilledByHook).
  std::function<bool(int64_t step)> die_before_reduce;
};

/// What a finished run ended with (for tests; dtrain-train prints it as its "final" line).
struct TrainingOutcome {
  int64_t step = 0;
  double loss = 0;
  uint64_t checksum = 0;
  int recoveries = 0;  ///< in-place recoveries this rank went through (the replacement's join counts)
  int roll_backs = 0;  ///< of them, those in which it rolled back one step
};

inline constexpr int kKilledByHook = 137;

/// Trains as dtrain-train with `worker`; returns the process exit status: 0 finished, 1 failed
/// (the message is on stderr), 2 bad settings. `outcome`, when given, is filled on success.
int train(worker::Worker& worker, const Options& options, const TrainingHooks& hooks = {},
          TrainingOutcome* outcome = nullptr);

}  // namespace dtrain::trainer
