#pragma once
// The run held against its own intent (spec.yaml intent:, issue 30): each recovery's time to
// train again, steps and time lost and action against intent.recovery (max_recovery, max_lost,
// mode), each met or missed with the event that proves it, and the run's training time against
// intent.target_duration. Pure: built from a RunRecord, for the report's Intent section.
//
//   time to train again  the failure (failure.detected's time less its latency_ms: when the
//                        failure became observable) → recovery.completed (the new generation's
//                        first step)
//   time lost            steps_lost × the failed generation's median step time (metrics.jsonl)
//   training time        goodput over events.jsonl: wall time less launch and shutdown, i.e.
//                        the first step → the end of training, recoveries included

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "launcher/report/run_record.h"

namespace dtrain::report {

/// One objective of intent.recovery held against one recovery.
struct IntentCheck {
  std::string objective;  ///< "max_recovery", "max_lost", "mode"
  std::string limit;      ///< "5m", "200 steps", "in-place", "restart (any recovery)"
  std::string measured;   ///< "1m12s", "37 steps", "restart", "unknown (no step time)"
  bool met = false;
};

struct RecoveryAgainstIntent {
  int generation = 0;      ///< the generation it started
  std::string cause;       ///< "worker.exit: rank 1 on gpu01"
  std::string action;      ///< recovery.completed action ("" from an older dtrain)
  std::optional<int64_t> time_to_train_ms;
  int64_t steps_lost = 0;
  std::optional<int64_t> lost_ms;
  std::vector<IntentCheck> checks;  ///< in the order max_recovery, max_lost, mode (those stated)
  std::string evidence;    ///< "recovery.completed at <ts> (gen 2), after failure.detected at <ts>"
};

struct IntentGrades {
  bool given = false;               ///< spec.yaml states an intent
  std::string unread;               ///< why spec.yaml could not be read (RunRecord::intent_unread)
  std::vector<std::string> stated;  ///< the intent in words, one line per part
  std::vector<RecoveryAgainstIntent> recoveries;
  /// intent.target_duration against the training time (none when the intent gives no target).
  std::optional<IntentCheck> target;
  std::string target_evidence;      ///< where the training time comes from
};

IntentGrades grade_intent(const RunRecord& record);

}  // namespace dtrain::report
