#pragma once
// Durations as users write them in specs and flags: "500ms", "10s", "5m", "1h" (also "1.5s").

#include <chrono>
#include <string>
#include <string_view>

#include "launcher/base/result.h"

namespace dtrain {

using Millis = std::chrono::milliseconds;

/// Parses "<number><unit>" with unit ms, s, m or h. A bare number is refused: the unit is
/// what keeps "timeout: 30" from meaning 30 ms to one reader and 30 s to another.
Result<Millis> parse_duration(std::string_view text);

/// "500ms", "10s", "1.5s", "5m", "1h" — the shortest exact form when there is one.
std::string format_duration(Millis duration);

}  // namespace dtrain
