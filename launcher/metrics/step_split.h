#pragma once
// Where the step time goes: each rank's step split into waiting for input (data_ms), time in
// collectives (comm_ms) and the rest (compute), and the part that costs the job most, named in
// words. One rule for every view: the report's step-time section (over metrics.jsonl) and the
// Prometheus families (over the ranks' latest beats) both build a StepSplit here.
//
// Data-parallel jobs stall on communication and on data reading (issue 28 item 6). The job-level
// split is the mean over ranks — a share of rank time: with one slow rank of four, three ranks
// wait in the all-reduce, so communication leads, and the split then names the rank they wait
// for (its busy time, data + compute, stands out). Communication with no such rank is the
// collectives themselves: the network, the topology or the message sizes.

#include <cstdint>
#include <unordered_map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "worker/contract/beat_metrics.h"

namespace dtrain::metrics {

enum class StepPart { data, communication, compute };

/// "data", "communication", "compute": the Prometheus label and the report's data-part.
std::string_view to_string(StepPart part);

/// A step's time, split; milliseconds. compute = step − data − comm, never below 0.
struct StepParts {
  double step_ms = 0, data_ms = 0, comm_ms = 0, compute_ms = 0;
  double of(StepPart part) const;
  double busy_ms() const { return data_ms + compute_ms; }  ///< the rank's own work, not waiting for peers
};

struct RankStepSplit {
  int rank = 0;  ///< kTypicalRank: the median rank of summary lines (runs beyond 64 ranks)
  StepParts parts;  ///< means over the rank's samples
  int64_t samples = 0;
};

inline constexpr int kTypicalRank = -1;

struct StepSplit {
  std::vector<RankStepSplit> ranks;  ///< by rank
  StepParts mean;                    ///< mean over ranks: the share of rank time
  /// Unset when no rank reported data_ms or comm_ms: then only the step time is known, and
  /// naming "compute" would be a guess.
  std::optional<StepPart> bottleneck;
  /// Communication leads and one rank's busy time stands out: the rank the others wait for.
  std::optional<int> waited_for;
  double median_busy_ms = 0;  ///< the median rank's own work (data + compute), summary rank aside
  double share(StepPart part) const;  ///< of mean.step_ms, 0..1
  /// "input 71%, collectives 5%, compute 24% of 98.0 ms a step": the one wording of the shares
  /// (the report, `dtrain status`, the verdict), `separator` between the parts.
  std::string shares_text(std::string_view separator = ", ") const;
  /// One sentence: the bottleneck, its share, and what to look at.
  std::string verdict() const;
};

/// Collects samples, then splits. A sample without step_ms is skipped; a missing data_ms or
/// comm_ms counts as 0 (that rank read no DataLoader or made no collective).
class StepSplitBuilder {
 public:
  void add(int rank, const contract::BeatMetrics& metrics);
  StepSplit build() const;

 private:
  struct Sums {
    double step_ms = 0, data_ms = 0, comm_ms = 0;
    int64_t samples = 0;
  };
  /// By rank; build() orders them. A hash map: a metrics file at 131,072 ranks built an ordered
  /// map of them every 5 s, a third of the file's cost.
  std::unordered_map<int, Sums> ranks_;
  bool any_data_ = false, any_comm_ = false;
};

}  // namespace dtrain::metrics
