#include "launcher/base/strings.h"

#include <algorithm>

namespace dtrain {

std::vector<std::string> split(std::string_view text, char separator) {
  std::vector<std::string> parts;
  size_t start = 0;
  for (;;) {
    size_t end = text.find(separator, start);
    parts.emplace_back(text.substr(start, end == std::string_view::npos ? std::string_view::npos : end - start));
    if (end == std::string_view::npos) break;
    start = end + 1;
  }
  return parts;
}

std::string_view trim(std::string_view text) {
  const char* space = " \t\r\n";
  size_t first = text.find_first_not_of(space);
  if (first == std::string_view::npos) return {};
  size_t last = text.find_last_not_of(space);
  return text.substr(first, last - first + 1);
}

bool starts_with(std::string_view text, std::string_view prefix) {
  return text.substr(0, prefix.size()) == prefix;
}

std::string join(const std::vector<std::string>& parts, std::string_view separator) {
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (i) out += separator;
    out += parts[i];
  }
  return out;
}

size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

std::string closest_match(std::string_view word, const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_distance = std::string::npos;
  for (const std::string& candidate : candidates) {
    size_t distance = edit_distance(word, candidate);
    if (distance < best_distance) {
      best_distance = distance;
      best = candidate;
    }
  }
  // A third of the word's length (at least 1, at most 3) is a plausible typo.
  size_t limit = std::clamp<size_t>(word.size() / 3, 1, 3);
  return best_distance <= limit ? best : std::string();
}

std::string shell_quote(std::string_view argument) {
  std::string quoted = "'";
  for (char c : argument) {
    if (c == '\'') quoted += "'\\''";
    else quoted += c;
  }
  quoted += "'";
  return quoted;
}

std::string printable(std::string_view text, size_t max_bytes) {
  static const char* hex = "0123456789abcdef";
  std::string out;
  size_t shown = std::min(text.size(), max_bytes);
  auto escape = [&out](unsigned char byte) {
    out += "\\x";
    out += hex[byte >> 4];
    out += hex[byte & 15];
  };
  for (size_t i = 0; i < shown; ++i) {
    auto byte = static_cast<unsigned char>(text[i]);
    auto next = i + 1 < shown ? static_cast<unsigned char>(text[i + 1]) : 0;
    if (byte < 0x20 || byte == 0x7f) {
      escape(byte);
    } else if (byte == 0xc2 && next >= 0x80 && next <= 0x9f) {
      // U+0080..U+009F, the C1 controls: U+009B is CSI and U+009D OSC to terminals that honour
      // them in UTF-8 (xterm), as good as ESC [ and ESC ].
      escape(byte);
      escape(next);
      ++i;
    } else {
      out += static_cast<char>(byte);
    }
  }
  if (shown < text.size()) out += "...";
  return out;
}

}  // namespace dtrain
