#include "launcher/base/clock.h"

#include <charconv>
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

int64_t thread_cpu_us() {
  timespec used{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &used);
  return static_cast<int64_t>(used.tv_sec) * 1'000'000 + used.tv_nsec / 1'000;
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

namespace {

bool read_digits(std::string_view text, size_t at, size_t digits, int& out) {
  if (at + digits > text.size()) return false;
  auto [end, error] = std::from_chars(text.data() + at, text.data() + at + digits, out);
  return error == std::errc() && end == text.data() + at + digits;
}

}  // namespace

std::optional<int64_t> parse_timestamp_utc(std::string_view text) {
  // YYYY-MM-DDTHH:MM:SS.mmmZ
  if (text.size() != 24 || text[4] != '-' || text[7] != '-' || text[10] != 'T' || text[13] != ':' ||
      text[16] != ':' || text[19] != '.' || text[23] != 'Z') {
    return std::nullopt;
  }
  int year = 0, month = 0, day = 0, hour = 0, minute = 0, second = 0, millis = 0;
  if (!read_digits(text, 0, 4, year) || !read_digits(text, 5, 2, month) || !read_digits(text, 8, 2, day) ||
      !read_digits(text, 11, 2, hour) || !read_digits(text, 14, 2, minute) || !read_digits(text, 17, 2, second) ||
      !read_digits(text, 20, 3, millis)) {
    return std::nullopt;
  }
  using namespace std::chrono;
  year_month_day date{std::chrono::year(year), std::chrono::month(static_cast<unsigned>(month)),
                      std::chrono::day(static_cast<unsigned>(day))};
  if (!date.ok() || hour > 23 || minute > 59 || second > 60) return std::nullopt;
  milliseconds since_epoch = sys_days(date).time_since_epoch() + hours(hour) + minutes(minute) +
                             seconds(second) + milliseconds(millis);
  return since_epoch.count();
}

}  // namespace dtrain
