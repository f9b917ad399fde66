#pragma once
// What every fuzz target uses to state an invariant. A broken invariant must end the process
// the way a sanitizer report does, so that libFuzzer saves the input as a crash artifact and
// the replay ctest case fails: print what broke and the values involved, then abort().

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <utility>

namespace dtrain::fuzz {

/// Aborts with "fuzz invariant broken: <what>\n  <detail>" unless `holds`.
inline void check(bool holds, const char* what, const std::string& detail = "") {
  if (holds) return;
  std::fprintf(stderr, "fuzz invariant broken: %s\n", what);
  if (!detail.empty()) std::fprintf(stderr, "  %s\n", detail.c_str());
  std::abort();
}

/// The input as text, for the parsers that take a string_view.
inline std::string_view as_text(const uint8_t* data, size_t size) {
  return std::string_view(reinterpret_cast<const char*>(data), size);
}

/// Splits `text` at its first '\n': {first line, the rest}. Targets that take two inputs
/// (filters and the hosts they apply to, overrides and a spec) read them this way, so a corpus
/// file stays readable text.
inline std::pair<std::string_view, std::string_view> first_line(std::string_view text) {
  size_t newline = text.find('\n');
  if (newline == std::string_view::npos) return {text, {}};
  return {text.substr(0, newline), text.substr(newline + 1)};
}

}  // namespace dtrain::fuzz
