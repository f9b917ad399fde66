#pragma once
// Goodput: the share of a run's wall time that trained the model, and where the rest went —
// computed from events.jsonl alone, so that `dtrain report` can do it long after the run, and
// the driver live (GoodputTracker fed the same events as they are recorded).
//
// The run's wall time (run.submitted → run.finished, or → now while it runs) is cut into
// intervals, each in exactly one category, so the categories always sum to the wall time:
//   launch            run.submitted → the first step of generation 0
//   productive        a generation's first step → its failure (or the end of training), less
//                     the two below
//   detection         the failure itself → failure.detected (a hang: the time the worker stood
//                     still, worker.hang's silent_ms; a lost host: host.lost's silent_ms; else
//                     failure.detected's latency_ms)
//   restart           failure.detected → the first step of the next generation (stop, re-plan,
//                     spawn, rendezvous, first step); also a supervisor's absence before run.resumed
//   redone_steps      steps a resumed generation trained again (recovery.completed's steps_lost)
//                     × the step time the failed generation had
//   checkpoint_stall  each checkpoint's save time (checkpoint.committed seconds, or stall_seconds
//                     when the writer reports it: an asynchronous save stalls less than it takes)
//   shutdown          the end of training (the first rank to exit 0, a stop request, or a
//                     failure nothing recovers from) → run.finished
// "First step" is generation.stepped when the log has it (dtrain writes it since issue 14);
// older logs fall back to recovery.completed, then comm.ready, then run.state running.

#include <cstdint>
#include <map>
#include <optional>
#include <vector>

#include <nlohmann/json.hpp>

#include "launcher/events/events.h"
#include "launcher/runlog/event_log.h"

namespace dtrain::metrics {

struct Goodput {
  double wall_seconds = 0;
  double productive_seconds = 0;
  double launch_seconds = 0;
  double detection_seconds = 0;
  double restart_seconds = 0;
  double redone_steps_seconds = 0;
  double checkpoint_stall_seconds = 0;
  double shutdown_seconds = 0;
  int64_t redone_steps = 0;
  int restarts = 0;
  bool finished = false;  ///< run.finished seen (else the wall time ends at "now")

  /// productive ÷ wall; 0 before any time has passed.
  double ratio() const { return wall_seconds > 0 ? productive_seconds / wall_seconds : 0.0; }
  double lost_seconds() const {
    return launch_seconds + detection_seconds + restart_seconds + redone_steps_seconds + checkpoint_stall_seconds +
           shutdown_seconds;
  }
  /// {"ratio", "wall_seconds", "productive_seconds", "lost_seconds": {"launch", "detection",
  ///  "restart", "redone_steps", "checkpoint_stall", "shutdown"}, "redone_steps", "restarts", "finished"}
  nlohmann::json to_json() const;
};

/// Follows a run's events one at a time (oldest first). The driver feeds it every event it
/// records; goodput_from_events() feeds it a whole log.
class GoodputTracker {
 public:
  /// precise_first_steps: the log has generation.stepped events (only they end a launch or a
  /// restart); otherwise the older markers do (see the top of this file).
  explicit GoodputTracker(bool precise_first_steps = true) : precise_(precise_first_steps) {}

  /// One event; `wall_ms` is when it happened (its "ts").
  void add(const LoggedEvent& event, int64_t wall_ms);
  /// The breakdown as of `now_wall_ms` (only used while run.finished has not been seen).
  Goodput at(int64_t now_wall_ms) const;

 private:
  enum class Phase { before_submit, launch, running, restart, shutdown, finished };
  void move_to(Phase phase, int64_t wall_ms);
  void first_step(int generation, int64_t step, int64_t wall_ms);
  double& bucket(Phase phase);
  void recovery_completed(const events::RecoveryCompleted& completed, int generation, int64_t wall_ms);
  void failure_detected(const events::FailureDetected& detected, int64_t wall_ms);

  bool precise_;
  Phase phase_ = Phase::before_submit;
  int64_t since_ms_ = 0;
  int64_t submitted_ms_ = 0;
  int64_t finished_ms_ = 0;
  int generation_ = 0;
  // Milliseconds per category (productive before redone steps and stalls are taken out).
  double launch_ms_ = 0, running_ms_ = 0, detection_ms_ = 0, restart_ms_ = 0, shutdown_ms_ = 0;
  double redone_ms_ = 0, stall_ms_ = 0;
  int64_t redone_steps_ = 0;
  int restarts_ = 0;
  // The running generation: when and at which step it first stepped, and its latest silence
  // (a hang or a lost host: how long before its detection the failure happened).
  int64_t generation_first_step_ms_ = 0;
  int64_t generation_first_step_ = -1;
  double running_in_generation_ms_ = 0;
  int64_t pending_silent_ms_ = -1;
  std::optional<double> failed_step_ms_;  ///< the failed generation's time per step
  int64_t failed_first_step_ = -1;
  double failed_running_ms_ = 0;
  std::map<std::pair<int64_t, int64_t>, double> checkpoint_seconds_;  ///< (gen, step) → stall
};

/// The goodput of a run from its events (read_logged_events(), oldest first); events without a
/// time are left out. `now_wall_ms` ends the wall time of a run that has not finished (default:
/// its last event).
Goodput goodput_from_events(const std::vector<LoggedEvent>& events, std::optional<int64_t> now_wall_ms = std::nullopt);


}  // namespace dtrain::metrics
