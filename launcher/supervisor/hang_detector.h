#pragma once
// Hang detection for one generation (docs/architecture.md §4: a worker alive but without progress for
// heartbeat.hang_timeout is a failure, like a crash). Which rank is to blame when ranks stop
// advancing, which ranks cannot be watched because they report no steps, and checkpoint saves,
// which hold every rank legitimately. Pure: fed the ranks' statuses and the time on each tick;
// the supervisor records what it finds and handles the hang as a failure. The limits are the ones
// in force (hang_timeouts.h sets them from the observed step time when they are auto).

#include <cstdint>
#include <optional>
#include <vector>

#include "launcher/spec/job_spec.h"
#include "launcher/supervisor/supervisor_types.h"

namespace dtrain::supervisor {

/// The heartbeat settings that hang detection uses, in milliseconds.
struct HangLimits {
  int64_t hang_timeout_ms = 0;        ///< heartbeat.hang_timeout in force
  int64_t checkpoint_timeout_ms = 0;  ///< heartbeat.checkpoint_hang_timeout() in force: a rank in a save
  int64_t interval_ms = 0;            ///< heartbeat.interval: beats are rate-limited to it
  /// The spec's values; an auto hang_timeout is its initial value (initial_hang_timeout()).
  static HangLimits of(const spec::HeartbeatSettings& heartbeat);
  bool operator==(const HangLimits&) const = default;
};

/// A rank found hung: the one most suspicious among those past (or nearly past) their limit.
struct Hang {
  int rank = -1;
  bool in_save = false;    ///< it was in a checkpoint save, so its limit was checkpoint_timeout
  int64_t silent_ms = 0;   ///< since its last step or phase change (or the end of the last save)
  int64_t limit_ms = 0;    ///< its limit: hang_timeout or checkpoint_timeout
  int64_t overdue_ms = 0;  ///< how long ago the first watched rank went past its limit
};

/// What one check found; each part is empty when there is nothing to say.
struct HangCheck {
  /// Running ranks without a step once hang_timeout has passed since the generation started:
  /// not watched until they beat with one. Found once per generation.
  std::vector<int> unwatched;
  /// Ranks named in `unwatched` that have beaten with a step since: watched from now on.
  std::vector<int> watched_again;
  std::optional<Hang> hang;
};

/// One generation's hang watch; a new generation gets a new detector.
class HangDetector {
 public:
  HangDetector() = default;
  HangDetector(HangLimits limits, int64_t generation_started_ms);

  /// A rank left a checkpoint save: every rank's quiet time restarts (they all waited for it).
  void save_ended(int64_t now_ms) { save_ended_ms_ = now_ms; }
  /// The limits in force from now on (an auto hang_timeout changes as steps are seen).
  void set_limits(const HangLimits& limits) { limits_ = limits; }
  const HangLimits& limits() const { return limits_; }
  /// Since when `rank` has been quiet as this detector measures it: its last step or phase
  /// change, or the end of the last save, whichever is latest.
  int64_t quiet_since(const RankStatus& rank) const;

  /// Called on every tick while the generation runs. `ranks` are the generation's, by rank.
  /// `maybe_host_loss`: a host of the generation has not been heard from lately, so ranks
  /// without progress may be the sign of its loss (heartbeat.timeout decides that): no hang is
  /// declared while it is set.
  HangCheck check(const std::vector<RankStatus>& ranks, int64_t now_ms, bool maybe_host_loss = false);

 private:
  HangLimits limits_;
  int64_t started_ms_ = 0;
  int64_t save_ended_ms_ = 0;     ///< the last end of a checkpoint save (any rank); 0: none yet
  bool exemption_checked_ = false;
  std::vector<int> unwatched_;    ///< named in `unwatched` and not heard with a step since
};

}  // namespace dtrain::supervisor
