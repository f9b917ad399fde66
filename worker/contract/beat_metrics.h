#pragma once
// The per-rank metrics a worker's beat carries (wire.h: {"type":"beat", ...}), as one struct and
// one table that every layer walks instead of naming the fields: the worker runtime writes them,
// the agent and the supervisor parse them (launcher/proto), the driver keeps each rank's newest
// (launcher/run/rank_progress), and the views show the rows the table says: state.json's rank
// rows and `dtrain status`, metrics.jsonl and the report's charts, the Prometheus families.
//
// Adding a metric is a member of BeatMetrics and a row of kBeatMetrics here, plus the code that
// measures it (worker/python/dtrain_worker.py for Python scripts, the trainer for dtrain-train).
// Nothing else names it: that is the point of this file (issue 27, "prove the seams").

#include <array>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace dtrain::contract {

/// What one beat reports beyond its step. Unset fields are left off the wire, and a beat
/// without a field leaves the rank's last value standing (workers report some only now and then).
struct BeatMetrics {
  std::optional<double> step_ms{};
  std::optional<double> loss{};
  std::optional<double> comm_ms{};  ///< time in collectives in the step
  std::optional<double> data_ms{};  ///< time waiting for input in the step
  std::optional<double> samples{};  ///< samples processed in the step (global); an integer on the wire
  /// The most accelerator memory the rank's process has held so far, in bytes (its high-water mark).
  std::optional<double> peak_memory_bytes{};
  bool operator==(const BeatMetrics&) const = default;
};

/// How a value reads: for `dtrain status`'s columns, the report's axes and Prometheus' base units
/// (milliseconds are exported as seconds).
enum class MetricUnit { plain, milliseconds, bytes };

/// Where a metric shows beyond the wire (every row) and the driver's table of ranks.
enum MetricShown : unsigned {
  kInStateJson = 1u << 0,    ///< state.json's rank rows (so `dtrain status --json` and resume)
  kInMetricsLine = 1u << 1,  ///< metrics.jsonl's rank entries and spreads, and the report's charts
  kInStatusTable = 1u << 2,  ///< a column of `dtrain status`'s rank table (when a rank has a value)
};

/// The per-host series past kPerRankLabelLimit ranks: none, the mean or the largest of its ranks.
enum class HostSummary { none, mean, max };

struct BeatMetric {
  std::string_view key;                       ///< on the wire, in state.json and in metrics.jsonl
  std::optional<double> BeatMetrics::*field;  ///< where it lives
  bool integral = false;                      ///< written and read as a non-negative integer
  MetricUnit unit = MetricUnit::plain;
  unsigned shown = 0;                         ///< MetricShown bits
  std::string_view title{};                   ///< in words: the report's chart
  std::string_view column{};                  ///< `dtrain status`'s column (kInStatusTable)
  std::string_view prometheus{};              ///< dtrain_rank_<this>, dtrain_host_<this>_<mean|max>; "": none
  std::string_view rank_help{};
  HostSummary host_summary = HostSummary::none;
  std::string_view host_help{};
};

inline constexpr std::array kBeatMetrics = {
    BeatMetric{.key = "step_ms",
               .field = &BeatMetrics::step_ms,
               .unit = MetricUnit::milliseconds,
               .shown = kInStateJson | kInMetricsLine,
               .title = "step time",
               .prometheus = "step_seconds",
               .rank_help = "The rank's latest step time",
               .host_summary = HostSummary::max,
               .host_help = "The longest latest step time of the host's ranks"},
    BeatMetric{.key = "loss",
               .field = &BeatMetrics::loss,
               .shown = kInStateJson | kInMetricsLine | kInStatusTable,
               .title = "loss",
               .column = "LOSS",
               .prometheus = "loss",
               .rank_help = "The rank's latest loss",
               .host_summary = HostSummary::mean,
               .host_help = "Mean latest loss of the host's ranks"},
    BeatMetric{.key = "comm_ms",
               .field = &BeatMetrics::comm_ms,
               .unit = MetricUnit::milliseconds,
               .shown = kInStateJson | kInMetricsLine,
               .title = "time in collectives",
               .prometheus = "comm_seconds",
               .rank_help = "The rank's latest time in collectives per step",
               .host_summary = HostSummary::mean,
               .host_help = "Mean time per step in collectives of the host's ranks"},
    BeatMetric{.key = "data_ms",
               .field = &BeatMetrics::data_ms,
               .unit = MetricUnit::milliseconds,
               .shown = kInStateJson | kInMetricsLine,
               .title = "time waiting for input",
               .prometheus = "data_seconds",
               .rank_help = "The rank's latest time waiting for input per step",
               .host_summary = HostSummary::mean,
               .host_help = "Mean time per step waiting for input of the host's ranks"},
    // Exported as dtrain_rank_samples_per_second's numerator, not on its own.
    BeatMetric{.key = "samples", .field = &BeatMetrics::samples, .integral = true, .title = "samples per step"},
    // Python: torch.cuda.max_memory_allocated() (dtrain_worker.py); dtrain-train: its own device
    // buffers (Staging). Absent where no accelerator is used.
    BeatMetric{.key = "peak_memory_bytes",
               .field = &BeatMetrics::peak_memory_bytes,
               .integral = true,
               .unit = MetricUnit::bytes,
               .shown = kInStateJson | kInMetricsLine | kInStatusTable,
               .title = "peak accelerator memory",
               .column = "PEAK MEM",
               .prometheus = "peak_accelerator_memory_bytes",
               .rank_help = "The most accelerator memory the rank's process has held (its high-water mark)",
               .host_summary = HostSummary::max,
               .host_help = "The largest peak accelerator memory of the host's ranks"},
};

/// The row of kBeatMetrics for `field` (every member of BeatMetrics has one).
constexpr size_t beat_metric_index(std::optional<double> BeatMetrics::*field) {
  for (size_t i = 0; i < kBeatMetrics.size(); ++i) {
    if (kBeatMetrics[i].field == field) return i;
  }
  return kBeatMetrics.size();
}
static_assert(sizeof(BeatMetrics) == kBeatMetrics.size() * sizeof(std::optional<double>),
              "every member of BeatMetrics needs its row in kBeatMetrics");

/// Writes each metric that is set and finite (and, with `only`, shown there) as out[key]: an
/// integer for an integral one. JSON has no NaN: a diverged loss is left out, as if unset. `JsonObject` is any JSON object type indexed by std::string (this header stays
/// std-only: the worker runtime and the launcher both write beats through it).
template <class JsonObject>
void write_beat_metrics(const BeatMetrics& metrics, JsonObject& out, unsigned only = ~0u) {
  for (const BeatMetric& metric : kBeatMetrics) {
    const std::optional<double>& value = metrics.*metric.field;
    if (!value || !std::isfinite(*value) || (only != ~0u && (metric.shown & only) == 0)) continue;
    if (metric.integral) out[std::string(metric.key)] = static_cast<int64_t>(*value);
    else out[std::string(metric.key)] = *value;
  }
}

}  // namespace dtrain::contract
