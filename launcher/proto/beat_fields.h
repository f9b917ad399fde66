#pragma once
// A beat's metrics as both parsers of a beat read them (worker_messages.cpp's FieldReader for a
// worker's line, agent_frame_parser.cpp's StrictFields for the frame an agent forwards): one loop
// over contract::kBeatMetrics, so a metric added there is parsed everywhere.

#include <array>
#include <cstdint>
#include <optional>
#include <string_view>

#include "worker/contract/beat_metrics.h"

namespace dtrain::proto {

/// Reads every metric of the table that `message` carries; the reader records a wrong type (or a
/// negative or fractional integral metric) as its failure.
template <class Reader>
void read_beat_metrics(Reader& message, contract::BeatMetrics& metrics) {
  for (const contract::BeatMetric& metric : contract::kBeatMetrics) {
    if (metric.integral) {
      std::optional<int64_t> value = message.optional_integer(metric.key, 0);
      metrics.*metric.field = value ? std::optional<double>(static_cast<double>(*value)) : std::nullopt;
    } else {
      metrics.*metric.field = message.optional_number(metric.key);
    }
  }
}

/// Every key a beat may carry: its type, step and phase, and the metrics.
inline constexpr auto kBeatKeys = [] {
  std::array<std::string_view, 3 + contract::kBeatMetrics.size()> keys{"type", "step", "phase"};
  for (size_t i = 0; i < contract::kBeatMetrics.size(); ++i) keys[3 + i] = contract::kBeatMetrics[i].key;
  return keys;
}();

}  // namespace dtrain::proto
