#include "launcher/agent/line_splitter.h"

namespace dtrain::agent {

std::vector<std::string> LineSplitter::feed(std::string_view bytes) {
  std::vector<std::string> lines;
  while (!bytes.empty()) {
    size_t newline = bytes.find('\n');
    std::string_view piece = bytes.substr(0, newline);
    size_t room = max_line_ - partial_.size();
    if (piece.size() >= room && (newline == std::string_view::npos || piece.size() > room)) {
      // The line reaches the cap: emit a full-size chunk and carry on with the rest.
      partial_.append(piece.substr(0, room));
      lines.push_back(std::move(partial_));
      partial_.clear();
      bytes.remove_prefix(room);
      continue;
    }
    partial_.append(piece);
    if (newline == std::string_view::npos) break;
    lines.push_back(std::move(partial_));
    partial_.clear();
    bytes.remove_prefix(newline + 1);
  }
  return lines;
}

std::vector<std::string> LineSplitter::finish() {
  std::vector<std::string> lines;
  if (!partial_.empty()) lines.push_back(std::move(partial_));
  partial_.clear();
  return lines;
}

}  // namespace dtrain::agent
