#include "launcher/base/clock.h"

#include <chrono>
#include <cstdio>
#include <ctime>

namespace dtrain {

int64_t SystemClock::monotonic_ms() const {
  using namespace std::chrono;
  return duration_cast<milliseconds>(steady_clock::now().time_since_epoch()).count();
}

int64_t SystemClock::wall_ms() const {
  using namespace std::chrono;
  return duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count();
}

ScaledClock::ScaledClock(int64_t speed)
    : speed_(speed < 1 ? 1 : speed), start_monotonic_(real_.monotonic_ms()), start_wall_(real_.wall_ms()) {}

int64_t ScaledClock::monotonic_ms() const { return start_monotonic_ + (real_.monotonic_ms() - start_monotonic_) * speed_; }

int64_t ScaledClock::wall_ms() const { return start_wall_ + (real_.monotonic_ms() - start_monotonic_) * speed_; }

std::string format_timestamp_utc(int64_t wall_ms) {
  std::time_t seconds = static_cast<std::time_t>(wall_ms / 1000);
  std::tm utc{};
  gmtime_r(&seconds, &utc);
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", utc.tm_year + 1900,
                utc.tm_mon + 1, utc.tm_mday, utc.tm_hour, utc.tm_min, utc.tm_sec,
                static_cast<int>(wall_ms % 1000));
  return buffer;
}

}  // namespace dtrain
