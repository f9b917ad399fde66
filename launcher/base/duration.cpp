#include "launcher/base/duration.h"

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

std::string format_duration(Millis duration) {
  long long ms = duration.count();
  char buffer[64];
  if (ms != 0 && ms % 3'600'000 == 0) std::snprintf(buffer, sizeof buffer, "%lldh", ms / 3'600'000);
  else if (ms != 0 && ms % 60'000 == 0) std::snprintf(buffer, sizeof buffer, "%lldm", ms / 60'000);
  else if (ms != 0 && ms % 1000 == 0) std::snprintf(buffer, sizeof buffer, "%llds", ms / 1000);
  else if (ms >= 1000) std::snprintf(buffer, sizeof buffer, "%.3gs", static_cast<double>(ms) / 1000.0);
  else std::snprintf(buffer, sizeof buffer, "%lldms", ms);
  return buffer;
}

}  // namespace dtrain
