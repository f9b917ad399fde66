#pragma once
// The hang timeouts in force (docs/architecture.md §4): heartbeat.hang_timeout, the checkpoint
// save's limit and elastic.progress_window. Values the spec sets are used as it sets them. An
// auto heartbeat.hang_timeout (the default) sets itself from what the run shows, as NVIDIA's
// resiliency extension does (a safety factor × the longest interval observed after a warm-up):
//
//  - The estimate is the longest interval between two step changes of one rank that the
//    supervisor saw (beats are rate-limited to heartbeat.interval, so it is never shorter than
//    the beats let a healthy rank be quiet), measured as the hang detector measures quiet time.
//    It only grows: a step that took that long once may do so again. It carries over to later
//    generations.
//  - Warm-up: each generation's first kWarmupSteps step changes of each rank are start-up
//    (imports, compilation, data loading, a checkpoint load) and not counted; until kSamples
//    intervals are counted, the limit is heartbeat.initial_hang_timeout() (1 minute), or
//    kFactor × the longest interval seen so far when that is longer.
//  - Then: kFactor × the estimate, never below the floor, max(1 s, kFloorIntervals ×
//    heartbeat.interval): a healthy rank may be quiet for two intervals (its own beat's rate
//    limit, then its agent's), so the floor leaves room for a late beat or two.
//  - A limit shorter than heartbeat.timeout cannot tell a hang from a lost host by time, so
//    once it is set from the step time, no hang is declared while a host of the generation is
//    unheard for unheard_after() (the driver says which in each Tick): host loss decides first.
//  - A checkpoint save: heartbeat.checkpoint_timeout when set (at least the hang timeout in
//    force); else the longest of 10 minutes, the hang timeout in force and kFactor × the longest
//    save seen.
//  - elastic.progress_window, when auto: 2 × the hang timeout in force.
//
// Pure: fed step changes and saves with how long they took; the supervisor records in_force()
// when take_change() says it moved (first leaving warm-up, then by more than 25 %).

#include <cstdint>
#include <optional>
#include <vector>

#include "launcher/events/events.h"
#include "launcher/spec/job_spec.h"
#include "launcher/supervisor/hang_detector.h"

namespace dtrain::supervisor {

class HangTimeouts {
 public:
  static constexpr int kWarmupSteps = 5;     ///< step changes of a rank, per generation, not counted
  static constexpr int kSamples = 3;         ///< counted intervals before warm-up ends
  static constexpr int kFactor = 5;          ///< the safety factor (NVIDIA's default, over the longest)
  static constexpr int kFloorIntervals = 5;  ///< the floor, in heartbeat intervals
  static constexpr int64_t kFloorMinMs = 1000;
  static constexpr int kUnheardIntervals = 3;  ///< a host not heard for this many intervals

  HangTimeouts() = default;
  explicit HangTimeouts(const spec::JobSpec& spec);

  bool automatic() const { return heartbeat_.hang_timeout_auto(); }
  /// How long a host may go unheard before a hang is not declared (automatic() only).
  int64_t unheard_after_ms() const { return kUnheardIntervals * heartbeat_.interval.count(); }

  /// Generation `gen` of `world_size` ranks starts, or continues in place: it warms up again.
  void new_generation(int gen, size_t world_size);
  /// `rank` reported a new step after being quiet for `quiet_ms` (since its last step or phase
  /// change, the end of the last save, or the generation's start).
  void step_changed(int rank, int64_t quiet_ms);
  /// A rank's checkpoint save took `ms`.
  void save_took(int64_t ms);

  /// The limits the hang detector uses now.
  HangLimits limits() const;
  /// The values in force, as hang_timeout.changed and state.json carry them.
  events::HangTimeoutChanged in_force() const;
  /// in_force() when an automatic value moved materially since the last one taken: leaving or
  /// entering warm-up, or a change of more than 25 % in the hang or checkpoint timeout. The first
  /// call of a run takes the warm-up value.
  std::optional<events::HangTimeoutChanged> take_change();

 private:
  bool warming_up() const { return counted_ < kSamples; }
  int64_t floor_ms() const;
  int64_t hang_ms() const;
  int64_t checkpoint_ms(int64_t hang) const;

  spec::HeartbeatSettings heartbeat_{};
  Millis progress_window_{0};
  int gen_ = 0;
  std::vector<int> changes_;                ///< this generation's step changes, by rank
  int counted_ = 0;                         ///< intervals counted in this generation
  int64_t warmup_longest_ms_ = 0;           ///< this generation's longest uncounted interval
  std::optional<int64_t> longest_step_ms_;  ///< the estimate (counted intervals, whole run)
  std::optional<int64_t> longest_save_ms_;
  std::optional<events::HangTimeoutChanged> taken_;
  bool taken_warm_ = false;  ///< taken_ was a warm-up value
};

}  // namespace dtrain::supervisor
