#pragma once
// events.jsonl: the run's append-only event log. Line 1 is a versioned header,
// {"dtrain_events":1,"run_id":"...","created":"2026-11-29T23:40:01.123Z"}; every later line is
// one event, {"ts":"<ISO-8601 UTC, ms>","ev":"worker.exit",...}, with "ts" first so that the
// file reads (and sorts) well with plain text tools. Event names: docs/architecture.md §3.

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "launcher/base/clock.h"
#include "launcher/base/fd.h"
#include "launcher/base/result.h"
#include "launcher/events/event.h"
#include "launcher/runlog/line_follower.h"

namespace dtrain {

/// The events.jsonl format this dtrain writes and reads.
inline constexpr int kEventLogVersion = 1;

/// Appends events. Each append is one write(2) of one whole line to an O_APPEND descriptor:
/// nothing is buffered in the process, so a supervisor killed at any moment leaves at most a
/// truncated final line, which readers skip. A write that fails part-way (disk full, quota, I/O
/// error) is cut back to the last newline, so the log holds whole lines or nothing.
class EventLog {
 public:
  /// Creates `path` (must not exist; mode 0600) and writes the header line.
  static Result<EventLog> create(const std::string& path, const std::string& run_id, int64_t wall_ms);

  /// Opens an existing log for appending (a resumed supervisor). Checks the header version and
  /// cuts off a truncated final line left by a writer that died mid-line, so the next event
  /// starts on a line of its own.
  static Result<EventLog> open_existing(const std::string& path);

  /// Appends one event to the live log of a run whose supervisor is writing it too (a drill's
  /// drill.injected): the same whole-line-or-nothing append, without open_existing()'s header
  /// check and cut of a final partial line (that line may be the supervisor's, being written).
  static Status append_to(const std::string& path, const nlohmann::json& event, int64_t wall_ms);

  /// Writes `event` (an object with a string "ev") as one line, with "ts" =
  /// format_timestamp_utc(wall_ms) as its first key (a "ts" in `event` is replaced).
  /// On a failed or short write the file is truncated back to its last newline and the error
  /// names the path, the errno text and, for ENOSPC/EDQUOT, where to free space; the event is
  /// lost but the log stays readable, and the next append starts on a line of its own.
  Status append(const nlohmann::json& event, int64_t wall_ms);

  const std::string& path() const { return path_; }

 private:
  EventLog(std::string path, UniqueFd fd) : path_(std::move(path)), fd_(std::move(fd)) {}
  /// Cuts the file back to just past its last '\n' (a partial line of a failed append).
  Status cut_partial_line();
  std::string path_;
  UniqueFd fd_;
  bool partial_line_left_ = false;  // a failed append could not be cut back yet
};

/// One events.jsonl event line, parsed and type-checked at the boundary (parse_event_line), so
/// that readers may use the fields below without a type check of their own.
struct EventRecord {
  std::string name;      ///< "ev", e.g. "worker.exit"
  std::string ts;        ///< "ts" as written, "2026-11-29T23:41:02.120Z"
  nlohmann::json event;  ///< the whole object, "ts" and "ev" included
};

/// Parses one event line (not the header line). Checks: a JSON object; string "ts" and "ev";
/// and every field that readers look up by name has the JSON type they expect when present
/// (integers: gen, rank, local_rank, pid, step, code, exit_code, world_size, restarts,
/// steps_lost; strings: host, state, kind, detail, signal, log, reason, fault, verdict, mode,
/// message; number: seconds). nlohmann's value() throws when a key holds another type, so a
/// line that passes here cannot make status, logs, resume or drill throw. The error names the
/// field and the problem, e.g. "\"gen\" is a string, expected an integer". Never throws.
Result<EventRecord> parse_event_line(std::string_view line);

/// One events.jsonl event line as its struct (events::Event), with the time the log stamped it.
struct LoggedEvent {
  std::string ts;  ///< "ts" as written, "2026-11-29T23:41:02.120Z"
  /// "gen" of the line: the supervisor stamps every event it records with its generation (also
  /// those whose struct has no gen of its own); absent before the first plan.
  std::optional<int> gen;
  events::Event event;
  /// ts as Unix-epoch milliseconds; nullopt when it is not in format_timestamp_utc's form.
  std::optional<int64_t> wall_ms() const;
};

/// The event as its line holds it: "ts", the "gen" stamp and the struct's fields (for
/// `dtrain status --json` and tools that print events whole).
nlohmann::json to_json(const LoggedEvent& event);

/// A line of events.jsonl that could not be read as an event: where it is and why. Readers
/// skip such a line and go on (one bad line must not hide the rest of a run's history).
struct EventLineError {
  std::string path;
  int64_t line = 0;     ///< 1-based; 0 when read from the end of the file (number unknown)
  std::string problem;  ///< e.g. "worker.exit.rank: expected an integer, got a string \"x\""
  std::string text;     ///< the line's first 80 bytes, control bytes escaped
  /// "<path>:<line>: skipped a corrupt line (<problem>): '<text>'" ("near the end" without a line).
  std::string message() const;
};

/// Receives every line skipped as unreadable.
using EventErrorSink = std::function<void(const EventLineError& error)>;

/// An event object as a writer built it (its "ts" may not be there yet) as a LoggedEvent: the
/// driver's own metrics read the events it records this way. Never throws.
Result<LoggedEvent> to_logged_event(const nlohmann::json& object);

/// Parses one event line (not the header line) into its struct: parse_event_line()'s checks,
/// then events::parse_event() (an unknown name is an events::UnknownEvent, not an error). Never
/// throws.
Result<LoggedEvent> parse_logged_event(std::string_view line);

/// Every event of the log at `path`, oldest first (the header is checked, not returned): the one
/// reader of events.jsonl for status, resume, the report, the registry, goodput and drills. A
/// missing file, a missing header or an unknown version is an error; a truncated final line (a
/// writer mid-line) is skipped silently; a line that does not parse (parse_logged_event) is
/// skipped and reported to `on_error` (when given), and the lines after it are still read. An
/// empty file (created, header not yet written) has no events.
Result<std::vector<LoggedEvent>> read_logged_events(const std::string& path, const EventErrorSink& on_error = nullptr);

/// The newest `count` events of the log at `path`, oldest first, read from the end of the file
/// (the header is checked too): `dtrain status` of a run with millions of events costs what the
/// last few cost. Bad lines among those read are skipped and reported (line 0: "near the end");
/// a truncated final line is skipped silently. Errors as read_logged_events().
Result<std::vector<LoggedEvent>> read_last_logged_events(const std::string& path, size_t count,
                                                         const EventErrorSink& on_error = nullptr);

/// Checks `event` (an events.jsonl object) against the event catalogue
/// (launcher/events/event_catalogue.h): a known name, and every field the catalogue says it always
/// carries. Empty when it conforms; else the problem, e.g. "worker.exit lacks \"pid\"". Tests
/// run it over every event of real runs, so a writer and the catalogue cannot drift apart.
std::string catalogue_problem(const nlohmann::json& event);

/// The serialised line for `event` (without '\n'): {"ts":...,<event's fields>}. Exposed for
/// tests and for tools that print events the way the log stores them.
std::string format_event_line(const nlohmann::json& event, int64_t wall_ms);

/// Reads events as they are appended, for `--follow` and `status` refreshes.
class EventFollower {
 public:
  explicit EventFollower(std::string path) : lines_(std::move(path)) {}
  /// The events appended since the last call (parse_logged_event); checks the header the first
  /// time it appears. Same errors as read_logged_events(), skipped lines go to `on_error`; after
  /// an error, every later call returns it again. A log that does not exist yet gives no events.
  Result<std::vector<LoggedEvent>> poll_events(const EventErrorSink& on_error = nullptr);
  /// How many lines were skipped as corrupt so far.
  int64_t skipped_lines() const { return skipped_lines_; }

 private:
  /// The event lines appended since the last call, numbered (header checked, blanks dropped).
  Result<std::vector<std::pair<int64_t, std::string>>> next_lines();
  /// Counts and reports a line that did not parse.
  void skipped(int64_t line_number, const std::string& line, const Error& why, const EventErrorSink& on_error);

  LineFollower lines_;
  int64_t line_number_ = 0;  // of the last line seen, for warnings
  int64_t skipped_lines_ = 0;
  std::optional<Error> failure_;
};

/// The event's "ts" (parse_timestamp_utc) as Unix-epoch milliseconds; nullopt when it is absent,
/// not a string, or not in format_timestamp_utc's form.
std::optional<int64_t> event_wall_ms(const nlohmann::json& event);

}  // namespace dtrain
