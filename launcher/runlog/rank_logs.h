#pragma once
// ranks/<rank>.log: everything one rank printed (stdout and stderr interleaved as the agent
// forwarded them, as torchrun's --tee shows them), across generations. Before a rank's first
// output in a generation comes a marker line of its own:
//   === dtrain generation 2 (2026-11-29T23:41:02.120Z) ===
// so `dtrain logs` shows where each restart began.
//
// With a size limit (the spec's logs.max_bytes), a file that would pass it is renamed to
// <rank>.log.1 (replacing an older one: one old file is kept) and a new <rank>.log begins with a
// rotation marker line:
//   === dtrain log rotated (2026-11-29T23:41:02.120Z, generation 2): earlier output is in 0.log.1 ===
// A rank's disk use stays below about 2 x the limit (plus one chunk). A .1 file that itself
// begins with a rotation marker tells `dtrain logs` that older output was rotated away.

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

/// True when `line` is the marker a rotated rank log begins with.
bool is_rotation_marker(std::string_view line);

/// `<rank_log_path>.1`: where a rotated rank log's earlier output is.
std::string rotated_rank_log_path(const std::string& rank_log_path);

/// Appends rank output to <ranks_dir>/<rank>.log. Keeps files open (O_APPEND) between calls and
/// writes each call with one write(2): nothing is buffered in the process.
class RankLogs {
 public:
  /// `ranks_dir` must exist (RunDirectory::create makes it). `max_bytes`: rotate a file that
  /// would grow past it (0: never).
  explicit RankLogs(std::string ranks_dir, uint64_t max_bytes = 0)
      : ranks_dir_(std::move(ranks_dir)), max_bytes_(max_bytes) {}

  /// Writes `text` as-is: whole lines ending in '\n', or a chunk that the next call continues.
  /// When `generation` differs from the last one written for this rank by this object
  /// (including the first write), a generation marker goes first, on a line of its own. A file
  /// that holds something and would pass max_bytes is rotated first; a failed rotation is
  /// reported (and tried again after another max_bytes) but the text is still written.
  Status append(int rank, int generation, std::string_view text, int64_t wall_ms);

 private:
  struct RankFile {
    UniqueFd fd;
    int generation = -1;
    bool at_line_start = true;
    uint64_t size = 0;  ///< bytes in the open file (from fstat at open, then counted)
  };
  Status open_file(RankFile& file, const std::string& path);
  Status rotate(int generation, RankFile& file, const std::string& path, int64_t wall_ms);

  std::string ranks_dir_;
  uint64_t max_bytes_ = 0;
  std::map<int, RankFile> files_;
};

}  // namespace dtrain
