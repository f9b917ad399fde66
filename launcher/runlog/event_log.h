#pragma once
// events.jsonl: the run's append-only event log. Line 1 is a versioned header,
// {"dtrain_events":1,"run_id":"...","created":"2026-11-29T23:40:01.123Z"}; every later line is
// one event, {"ts":"<ISO-8601 UTC, ms>","ev":"worker.exit",...}, with "ts" first so that the
// file reads (and sorts) well with plain text tools. Event names: DESIGN.md §3.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "launcher/base/fd.h"
#include "launcher/base/result.h"
#include "launcher/runlog/line_follower.h"

namespace dtrain {

/// The events.jsonl format this dtrain writes and reads.
inline constexpr int kEventLogVersion = 1;

/// Appends events. Each append is one write(2) of one whole line to an O_APPEND descriptor:
/// nothing is buffered in the process, so a supervisor killed at any moment leaves at most a
/// truncated final line, which readers skip.
class EventLog {
 public:
  /// Creates `path` (must not exist; mode 0600) and writes the header line.
  static Result<EventLog> create(const std::string& path, const std::string& run_id, int64_t wall_ms);

  /// Opens an existing log for appending (a resumed supervisor). Checks the header version and
  /// cuts off a truncated final line left by a writer that died mid-line, so the next event
  /// starts on a line of its own.
  static Result<EventLog> open_existing(const std::string& path);

  /// Writes `event` (an object with a string "ev") as one line, with "ts" =
  /// format_timestamp_utc(wall_ms) as its first key (a "ts" in `event` is replaced).
  Status append(const nlohmann::json& event, int64_t wall_ms);

  const std::string& path() const { return path_; }

 private:
  EventLog(std::string path, UniqueFd fd) : path_(std::move(path)), fd_(std::move(fd)) {}
  std::string path_;
  UniqueFd fd_;
};

/// The serialised line for `event` (without '\n'): {"ts":...,<event's fields>}. Exposed for
/// tests and for tools that print events the way the log stores them.
std::string format_event_line(const nlohmann::json& event, int64_t wall_ms);

/// Every event of the log at `path`, oldest first (the header is checked, not returned).
/// A missing header or an unknown version is an error; a truncated final line (a writer
/// mid-line) is skipped; a corrupt line before it is an error naming "<path>:<line>".
/// An empty file (created, header not yet written) has no events.
Result<std::vector<nlohmann::json>> read_events(const std::string& path);

/// Reads events as they are appended, for `--follow` and `status` refreshes.
class EventFollower {
 public:
  explicit EventFollower(std::string path) : lines_(std::move(path)) {}
  /// The events appended since the last call; checks the header the first time it appears.
  /// Same errors as read_events(); after one, every later call returns it again. A log that
  /// does not exist yet gives no events.
  Result<std::vector<nlohmann::json>> poll();

 private:
  LineFollower lines_;
  int64_t line_number_ = 0;  // of the last line seen, for error messages
  std::optional<Error> failure_;
};

}  // namespace dtrain
