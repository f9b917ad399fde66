#pragma once
// Straggler detection from step times, the way NVIDIA's resiliency extension scores ranks: each
// rank's median time over a window of its recent steps; its score is the fastest rank's median
// over its own (1: as fast as the fastest; 0.5: twice as slow). A rank whose score falls below
// the threshold is a straggler — reported once per rank and generation, and cleared once when it
// keeps up again.
//
// The time scored is the rank's own work: the step time less its time in collectives when the
// worker reports it (comm_ms). In synchronous data parallelism every rank waits for the slowest
// at the all-reduce, so whole step times are alike; the slow rank is the one that waits least.

#include <cstdint>
#include <optional>
#include <vector>

namespace dtrain::metrics {

struct StragglerOptions {
  double threshold = 0.75;      ///< metrics.straggler_threshold
  size_t window = 20;           ///< steps per rank kept for its median
  size_t min_samples = 5;       ///< a rank is scored once it has this many
  /// Medians below this count as this much: a rank that works 0.3 ms per step is not four times
  /// slower than one that works 0.08 ms (scheduling noise), but one that works 30 ms is.
  double noise_floor_ms = 5;
};

struct StragglerChange {
  int rank = 0;
  bool detected = true;  ///< false: cleared
  double score = 1;
  double median_ms = 0;
  double fastest_median_ms = 0;
};

class StragglerDetector {
 public:
  explicit StragglerDetector(StragglerOptions options = {}) : options_(options) {}

  /// A new generation of `world_size` ranks: windows, scores and reports start over.
  void reset(int world_size);
  /// A rank's time for `step` (one sample per step: a repeated or older step is ignored).
  void add(int rank, int64_t step, double work_ms);
  /// Scores every rank with enough samples; returns the detections and clears since last time.
  std::vector<StragglerChange> evaluate();

  /// The score of `rank` at the last evaluate(), when it had one.
  std::optional<double> score(int rank) const;
  /// The median of `rank`'s window at the last evaluate(), when it had one.
  std::optional<double> median_ms(int rank) const;
  bool is_straggler(int rank) const;
  /// Ranks that are stragglers now.
  int stragglers() const;
  const StragglerOptions& options() const { return options_; }

 private:
  struct RankWindow {
    std::vector<double> times;  ///< ring of the last options_.window samples
    size_t next = 0;
    int64_t last_step = -1;
    std::optional<double> score;
    std::optional<double> median_ms;
    bool straggling = false;
    bool reported = false;  ///< straggler.detected sent this generation
    bool cleared = false;   ///< straggler.cleared sent this generation
  };
  StragglerOptions options_;
  std::vector<RankWindow> ranks_;
  bool changed_ = false;
};

}  // namespace dtrain::metrics
