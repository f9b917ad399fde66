#pragma once
// Cuts a worker's output stream into lines for `log` messages. A partial line is kept until its
// newline or EOF; a line longer than the cap is split so that one runaway line (a progress bar
// without newlines, a binary dump) cannot grow the agent's memory or a frame without bound.

#include <string>
#include <string_view>
#include <vector>

namespace dtrain::agent {

class LineSplitter {
 public:
  static constexpr size_t kDefaultMaxLine = 64 * 1024;
  explicit LineSplitter(size_t max_line = kDefaultMaxLine) : max_line_(max_line) {}

  /// Complete lines (without their '\n') found after appending `bytes`.
  std::vector<std::string> feed(std::string_view bytes);

  /// At EOF: the unterminated rest, if any (at most one line, since feed() keeps it short).
  std::vector<std::string> finish();

 private:
  size_t max_line_;
  std::string partial_;
};

}  // namespace dtrain::agent
