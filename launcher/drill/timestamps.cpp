#include "launcher/drill/timestamps.h"

#include <charconv>
#include <ctime>

#include "launcher/runlog/json_access.h"

namespace dtrain::drill {

namespace {

bool read_number(std::string_view text, size_t at, size_t digits, int& out) {
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
  if (!read_number(text, 0, 4, year) || !read_number(text, 5, 2, month) || !read_number(text, 8, 2, day) ||
      !read_number(text, 11, 2, hour) || !read_number(text, 14, 2, minute) || !read_number(text, 17, 2, second) ||
      !read_number(text, 20, 3, millis)) {
    return std::nullopt;
  }
  std::tm parts{};
  parts.tm_year = year - 1900;
  parts.tm_mon = month - 1;
  parts.tm_mday = day;
  parts.tm_hour = hour;
  parts.tm_min = minute;
  parts.tm_sec = second;
  time_t seconds = ::timegm(&parts);
  return static_cast<int64_t>(seconds) * 1000 + millis;
}

std::optional<int64_t> event_wall_ms(const nlohmann::json& event) {
  const nlohmann::json* ts = json_member(event, "ts");
  if (!ts || !ts->is_string()) return std::nullopt;
  return parse_timestamp_utc(ts->get<std::string>());
}

}  // namespace dtrain::drill
