#pragma once
// Reads a growing text file line by line from a byte offset: the building block of
// `dtrain logs --follow` and the incremental event reader. A writer may be mid-line, so only
// complete lines ('\n'-terminated) are returned; the unfinished rest waits for the next poll.

#include <cstdint>
#include <string>
#include <vector>

#include "launcher/base/fd.h"
#include "launcher/base/result.h"

namespace dtrain {

class LineFollower {
 public:
  /// Follows `path` from byte `start_offset`. The file need not exist yet.
  explicit LineFollower(std::string path, int64_t start_offset = 0);

  /// The complete lines appended since the last call (without '\n'), at most about
  /// `max_bytes` of them per call (call again while it returns lines). A missing file gives
  /// none. A file that shrank below the lines already returned (truncated or replaced) is an
  /// error naming the path; an unfinished last line that was cut off is not.
  Result<std::vector<std::string>> poll(size_t max_bytes = 1 << 20);

  /// The text after the last '\n' read so far, which is then forgotten; for printing a final
  /// unterminated line once the writer is known to be done.
  std::string take_partial();

  /// True when the path now names another file than the one being read (a rotated log: the
  /// old file was renamed away and a new one made). Read the old one to its end, then follow
  /// the path again with a new LineFollower.
  bool replaced() const;

  /// Byte offset just past the last complete line returned.
  int64_t offset() const { return offset_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  UniqueFd fd_;
  int64_t offset_ = 0;       // past the last complete line handed out
  std::string partial_;      // bytes after offset_ as of the last poll (re-read each poll)
};

/// The end of a file, for `--tail N`.
struct FileTail {
  /// The last complete lines, at most the count asked for, oldest first, without '\n'.
  std::vector<std::string> lines;
  /// Text after the last '\n' (a line still being written, or a final unterminated line).
  std::string partial;
  /// Byte offset just past the last '\n': where a LineFollower continues.
  int64_t complete_end = 0;
};

/// Reads the last `count` complete lines of `path` by scanning back from the end, so the cost
/// does not grow with the file. A missing file gives an empty tail.
Result<FileTail> read_tail_lines(const std::string& path, size_t count);

}  // namespace dtrain
