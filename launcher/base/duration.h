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

/// How a duration is written. One formatter for the whole launcher: these are the styles
/// users see, each in its own place, and they differ on purpose.
enum class DurationStyle {
  /// "500ms", "10s", "1.5s", "5m", "1h": the shortest exact form when there is one (else
  /// three significant digits), as specs and flags are written; for messages about them.
  exact,
  /// "5s", "1m05s", "2h03m", "3d04h": whole seconds, coarse enough to read at a glance; for
  /// how long a run has taken or will take (status, history). Negative reads as "0s".
  elapsed,
  /// "0.4s", "12.0s" under a minute, then as `elapsed`: heartbeat ages, where tenths matter.
  tenths,
  /// "850 ms", "12.3 s" under a minute, then as `elapsed`: times on the HTML report, where
  /// recovery phases and heat-map columns are often under a second.
  report,
  /// "1.500": seconds with three decimals, as sleep(1) takes them in a shell command.
  decimal_seconds,
};

/// `duration` written in `style` (see DurationStyle).
std::string format_duration(Millis duration, DurationStyle style = DurationStyle::exact);

}  // namespace dtrain
