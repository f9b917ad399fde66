#include "launcher/base/duration.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace dtrain {

Result<Millis> parse_duration(std::string_view text) {
  const std::string fix = "write a number with a unit: 500ms, 10s, 5m or 1h";
  if (text.empty()) return Error::user("empty duration; " + fix);
  size_t unit_start = 0;
  while (unit_start < text.size() &&
         ((text[unit_start] >= '0' && text[unit_start] <= '9') || text[unit_start] == '.')) {
    ++unit_start;
  }
  std::string number(text.substr(0, unit_start));
  std::string_view unit = text.substr(unit_start);
  if (number.empty() || number == "." || number.find('.') != number.rfind('.')) {
    return Error::user("'" + std::string(text) + "' is not a duration; " + fix);
  }
  double scale = 0;
  if (unit == "ms") scale = 1;
  else if (unit == "s") scale = 1000;
  else if (unit == "m") scale = 60'000;
  else if (unit == "h") scale = 3'600'000;
  else if (unit.empty()) return Error::user("'" + std::string(text) + "' has no unit; " + fix);
  else return Error::user("'" + std::string(text) + "' has unknown unit '" + std::string(unit) + "'; " + fix);
  double value = std::strtod(number.c_str(), nullptr) * scale;
  if (!std::isfinite(value) || value > 1e15) {
    return Error::user("'" + std::string(text) + "' is too long a duration");
  }
  return Millis(static_cast<long long>(std::llround(value)));
}

namespace {

std::string exact(long long ms) {
  char buffer[64];
  if (ms != 0 && ms % 3'600'000 == 0) std::snprintf(buffer, sizeof buffer, "%lldh", ms / 3'600'000);
  else if (ms != 0 && ms % 60'000 == 0) std::snprintf(buffer, sizeof buffer, "%lldm", ms / 60'000);
  else if (ms != 0 && ms % 1000 == 0) std::snprintf(buffer, sizeof buffer, "%llds", ms / 1000);
  else if (ms >= 1000) std::snprintf(buffer, sizeof buffer, "%.3gs", static_cast<double>(ms) / 1000.0);
  else std::snprintf(buffer, sizeof buffer, "%lldms", ms);
  return buffer;
}

std::string elapsed(long long ms) {
  long long s = std::max(0LL, ms) / 1000;
  char buffer[48];
  if (s < 60) std::snprintf(buffer, sizeof buffer, "%llds", s);
  else if (s < 3600) std::snprintf(buffer, sizeof buffer, "%lldm%02llds", s / 60, s % 60);
  else if (s < 86400) std::snprintf(buffer, sizeof buffer, "%lldh%02lldm", s / 3600, s / 60 % 60);
  else std::snprintf(buffer, sizeof buffer, "%lldd%02lldh", s / 86400, s / 3600 % 24);
  return buffer;
}

}  // namespace

std::string format_duration(Millis duration, DurationStyle style) {
  long long ms = duration.count();
  char buffer[64];
  switch (style) {
    case DurationStyle::exact: return exact(ms);
    case DurationStyle::elapsed: return elapsed(ms);
    case DurationStyle::tenths:
      if (ms >= 60'000) return elapsed(ms);
      std::snprintf(buffer, sizeof buffer, "%.1fs", static_cast<double>(std::max(0LL, ms)) / 1000.0);
      return buffer;
    case DurationStyle::report:
      ms = std::max(0LL, ms);
      if (ms >= 60'000) return elapsed(ms);
      if (ms < 1000) return std::to_string(ms) + " ms";
      std::snprintf(buffer, sizeof buffer, "%.1f s", static_cast<double>(ms) / 1000.0);
      return buffer;
    case DurationStyle::decimal_seconds:
      std::snprintf(buffer, sizeof buffer, "%lld.%03lld", ms / 1000, ms % 1000);
      return buffer;
  }
  return exact(ms);
}

}  // namespace dtrain
