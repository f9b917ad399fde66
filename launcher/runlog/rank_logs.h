#pragma once
// ranks/<rank>.log: everything one rank printed (stdout and stderr interleaved as the agent
// forwarded them, as torchrun's --tee shows them), across generations. Before a rank's first
// output in a generation comes a marker line of its own:
//   === dtrain generation 2 (2026-11-29T23:41:02.120Z) ===
// so `dtrain logs` shows where each restart began.

#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include "launcher/base/fd.h"
#include "launcher/base/result.h"

namespace dtrain {

/// "=== dtrain generation <g> (<iso ts>) ===" (without '\n').
std::string generation_marker(int generation, int64_t wall_ms);

/// True when `line` is a generation marker; sets *generation when given.
bool parse_generation_marker(std::string_view line, int* generation = nullptr);

/// Appends rank output to <ranks_dir>/<rank>.log. Keeps files open (O_APPEND) between calls and
/// writes each call with one write(2): nothing is buffered in the process.
class RankLogs {
 public:
  /// `ranks_dir` must exist (RunDirectory::create makes it).
  explicit RankLogs(std::string ranks_dir) : ranks_dir_(std::move(ranks_dir)) {}

  /// Writes `text` as-is: whole lines ending in '\n', or a chunk that the next call continues.
  /// When `generation` differs from the last one written for this rank by this object
  /// (including the first write), a generation marker goes first, on a line of its own.
  Status append(int rank, int generation, std::string_view text, int64_t wall_ms);

  /// Closes every file (they reopen on the next append).
  void close_all() { files_.clear(); }

 private:
  struct RankFile {
    UniqueFd fd;
    int generation = -1;
    bool at_line_start = true;
  };
  std::string ranks_dir_;
  std::map<int, RankFile> files_;
};

}  // namespace dtrain
