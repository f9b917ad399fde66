#include "launcher/runlog/event_log.h"

#include <algorithm>
#include <cerrno>
#include <climits>
#include <iterator>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "launcher/base/clock.h"
#include "launcher/events/event_catalogue.h"
#include "launcher/base/json_fields.h"

namespace dtrain {
namespace {

Status check_header(const std::string& path, std::string_view line) {
  nlohmann::json header = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  std::optional<int64_t> version = json_int(header, "dtrain_events");
  if (header.is_discarded() || !version) {
    return Error::infra(path + ":1: not a dtrain event log (line 1 must be the header "
                               "{\"dtrain_events\":1,...})");
  }
  if (*version != kEventLogVersion) {
    return Error::user(path + ":1: event log format version " + std::to_string(*version) +
                       " is not the one this dtrain reads (" + std::to_string(kEventLogVersion) +
                       "); use the dtrain version that wrote the run");
  }
  return {};
}

// What a field must hold when an event has it. The names are those that readers (cli/,
// launcher/drill/, launcher/run/resume_point.cpp, launcher/report/) look up; nlohmann's value()
// throws on any other type, and a throw there ends `dtrain status` with "internal bug".
enum class FieldType { integer, string, number };

struct TypedField {
  const char* name;
  FieldType type;
};

constexpr TypedField kTypedFields[] = {
    {"gen", FieldType::integer},        {"rank", FieldType::integer},
    {"local_rank", FieldType::integer}, {"pid", FieldType::integer},
    {"step", FieldType::integer},       {"code", FieldType::integer},
    {"exit_code", FieldType::integer},  {"world_size", FieldType::integer},
    {"restarts", FieldType::integer},   {"steps_lost", FieldType::integer},
    {"host", FieldType::string},        {"state", FieldType::string},
    {"kind", FieldType::string},        {"detail", FieldType::string},
    {"signal", FieldType::string},      {"log", FieldType::string},
    {"reason", FieldType::string},      {"fault", FieldType::string},
    {"verdict", FieldType::string},     {"mode", FieldType::string},
    {"message", FieldType::string},     {"seconds", FieldType::number},
};

const char* type_name(const nlohmann::json& value) {
  if (value.is_null()) return "null";
  if (value.is_number_integer() || value.is_number_unsigned()) return "an integer";
  if (value.is_number_float()) return "a float";
  if (value.is_string()) return "a string";
  if (value.is_boolean()) return "a boolean";
  if (value.is_object()) return "an object";
  if (value.is_array()) return "an array";
  return "binary";
}

bool has_type(const nlohmann::json& value, FieldType type) {
  switch (type) {
    case FieldType::integer: return value.is_number_integer() || value.is_number_unsigned();
    case FieldType::string: return value.is_string();
    case FieldType::number: return value.is_number();
  }
  return false;
}

const char* expected_name(FieldType type) {
  switch (type) {
    case FieldType::integer: return "an integer";
    case FieldType::string: return "a string";
    case FieldType::number: return "a number";
  }
  return "?";
}

std::string shown_line(std::string_view line) {
  std::string shown = json_compact(nlohmann::json(std::string(line.substr(0, 80))));
  shown = shown.substr(1, shown.size() - 2);  // escaped control bytes, without the quotes
  if (line.size() > 80) shown += "...";
  return shown;
}

bool is_disk_full(int error_number) { return error_number == ENOSPC || error_number == EDQUOT; }

std::string directory_of(const std::string& path) {
  size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

// Writes all of `bytes`; on failure returns the errno (0 for a write that made no progress).
int write_whole(int fd, std::string_view bytes) {
  while (!bytes.empty()) {
    ssize_t written = ::write(fd, bytes.data(), bytes.size());
    if (written < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    if (written == 0) return EIO;
    bytes.remove_prefix(static_cast<size_t>(written));
  }
  return 0;
}

}  // namespace

std::string catalogue_problem(const nlohmann::json& event) {
  std::string name = json_string(event, "ev");
  const events::EventType* type = events::find_event_type(name);
  if (!type) return "\"" + name + "\" is not in the event catalogue";
  std::string missing;
  for (std::string_view field : type->fields) {
    if (!event.contains(std::string(field))) missing += (missing.empty() ? "\"" : ", \"") + std::string(field) + "\"";
  }
  return missing.empty() ? "" : name + " lacks " + missing;
}

Result<EventRecord> parse_event_line(std::string_view line) {
  nlohmann::json event = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (event.is_discarded()) return Error::infra("not valid JSON");
  if (!event.is_object()) return Error::infra("not a JSON object");
  EventRecord record;
  const nlohmann::json* ts = json_member(event, "ts");
  if (!ts) return Error::infra("no \"ts\"");
  if (!ts->is_string()) return Error::infra(std::string("\"ts\" is ") + type_name(*ts) + ", expected a string");
  const nlohmann::json* name = json_member(event, "ev");
  if (!name) return Error::infra("no \"ev\"");
  if (!name->is_string()) return Error::infra(std::string("\"ev\" is ") + type_name(*name) + ", expected a string");
  for (const TypedField& field : kTypedFields) {
    const nlohmann::json* value = json_member(event, field.name);
    if (value && !has_type(*value, field.type)) {
      return Error::infra(std::string("\"") + field.name + "\" is " + type_name(*value) + ", expected " +
                          expected_name(field.type));
    }
  }
  record.ts = ts->get<std::string>();
  record.name = name->get<std::string>();
  record.event = std::move(event);
  return record;
}

std::string format_event_line(const nlohmann::json& event, int64_t wall_ms) {
  nlohmann::json rest = event;
  rest.erase("ts");
  std::string line = "{\"ts\":\"" + format_timestamp_utc(wall_ms) + "\"";
  std::string fields = json_compact(rest);  // "{...}" in key order
  if (fields.size() > 2) line += "," + fields.substr(1, fields.size() - 2);
  line += "}";
  return line;
}

Result<EventLog> EventLog::create(const std::string& path, const std::string& run_id, int64_t wall_ms) {
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC, 0600));
  if (!fd.valid()) return Error::infra(path + ": cannot create event log: " + errno_text(errno));
  nlohmann::json header = {{"dtrain_events", kEventLogVersion},
                           {"run_id", run_id},
                           {"created", format_timestamp_utc(wall_ms)}};
  // Key order matters to people reading the file: version first.
  std::string line = "{\"dtrain_events\":" + std::to_string(kEventLogVersion) +
                     ",\"run_id\":" + json_compact(header["run_id"]) +
                     ",\"created\":" + json_compact(header["created"]) + "}\n";
  if (int failed = write_whole(fd.get(), line); failed != 0) {
    // A half-written header would make the log unreadable forever; leave no file instead.
    ::unlink(path.c_str());
    std::string fix = is_disk_full(failed) ? "; free space on the file system of " + directory_of(path) : "";
    return Error::infra(path + ": cannot write the event log header: " + errno_text(failed) + fix);
  }
  return EventLog(path, std::move(fd));
}

Result<EventLog> EventLog::open_existing(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDWR | O_APPEND | O_CLOEXEC));
  if (!fd.valid()) return Error::infra(path + ": cannot open event log: " + errno_text(errno));
  Result<FileTail> tail = read_tail_lines(path, 0);
  if (!tail) return tail.error();
  if (!tail->partial.empty()) {
    if (::ftruncate(fd.get(), static_cast<off_t>(tail->complete_end)) != 0) {
      return Error::infra(path + ": cannot cut off the truncated last line: " + errno_text(errno));
    }
  }
  LineFollower first(path);
  Result<std::vector<std::string>> lines = first.poll(4096);
  if (!lines) return lines.error();
  if (lines->empty()) return Error::infra(path + ": event log has no header line");
  if (Status header = check_header(path, lines->front()); !header) return header.error();
  return EventLog(path, std::move(fd));
}

Status EventLog::append_to(const std::string& path, const nlohmann::json& event, int64_t wall_ms) {
  UniqueFd fd(::open(path.c_str(), O_RDWR | O_APPEND | O_CLOEXEC));
  if (!fd.valid()) return Error::infra(path + ": cannot append: " + errno_text(errno));
  return EventLog(path, std::move(fd)).append(event, wall_ms);
}

Status EventLog::append(const nlohmann::json& event, int64_t wall_ms) {
  const nlohmann::json* name = json_member(event, "ev");
  if (!name || !name->is_string()) {
    return Error::internal("event without a string \"ev\": " + json_compact(event));
  }
  // A line of an earlier failed append that could not be cut off then would glue itself to
  // this one; try again first.
  if (partial_line_left_) {
    if (Status cut = cut_partial_line(); !cut) return cut;
  }
  if (int failed = write_whole(fd_.get(), format_event_line(event, wall_ms) + "\n"); failed != 0) {
    std::string what = path_ + ": cannot append event '" + name->get<std::string>() + "': " + errno_text(failed);
    Status cut = cut_partial_line();
    what += cut ? "; the log was cut back to its last whole line" : "; and " + cut.error().message;
    if (is_disk_full(failed)) {
      what += "; free space on the file system of " + directory_of(path_) + " (later events are written again once there is room)";
    }
    return Error::infra(what);
  }
  return {};
}

Status EventLog::cut_partial_line() {
  // The last newline, not the size before this append: another writer (a drill) may have
  // appended whole lines in between, and those must stay.
  Result<FileTail> tail = read_tail_lines(path_, 0);
  if (tail && (tail->partial.empty() || ::ftruncate(fd_.get(), static_cast<off_t>(tail->complete_end)) == 0)) {
    partial_line_left_ = false;
    return {};
  }
  partial_line_left_ = true;
  std::string why = tail ? errno_text(errno) : tail.error().message;
  return Error::infra(path_ + ": cannot cut off a partly written line: " + why);
}

namespace {

/// Every event of the log at `path`, oldest first.
Result<std::vector<LoggedEvent>> read_all(const std::string& path, const EventErrorSink& on_error) {
  if (::access(path.c_str(), F_OK) != 0) return Error::infra(path + ": " + errno_text(errno));
  EventFollower follower(path);
  std::vector<LoggedEvent> events;
  for (;;) {
    Result<std::vector<LoggedEvent>> batch = follower.poll_events(on_error);
    if (!batch) return batch.error();
    if (batch->empty()) break;
    for (LoggedEvent& event : *batch) events.push_back(std::move(event));
  }
  return events;
}

/// The newest `count` events of the log at `path`, oldest first.
Result<std::vector<LoggedEvent>> read_last(const std::string& path, size_t count, const EventErrorSink& on_error) {
  using T = LoggedEvent;
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return Error::infra(path + ": " + errno_text(errno));
  struct stat info {};
  if (::fstat(fd.get(), &info) != 0) return Error::infra(path + ": " + errno_text(errno));
  auto read_at = [&](off_t offset, size_t size) -> Result<std::string> {
    std::string bytes(size, '\0');
    ssize_t got = ::pread(fd.get(), bytes.data(), size, offset);
    if (got < 0) return Error::infra(path + ": " + errno_text(errno));
    bytes.resize(static_cast<size_t>(got));
    return bytes;
  };
  auto size = static_cast<size_t>(info.st_size);
  if (size == 0) return std::vector<T>{};  // created, header not written yet
  Result<std::string> head = read_at(0, std::min<size_t>(size, 4096));
  if (!head) return head.error();
  size_t header_end = head->find('\n');
  if (header_end == std::string::npos) return std::vector<T>{};  // header being written
  if (Status header = check_header(path, std::string_view(*head).substr(0, header_end)); !header) {
    return header.error();
  }
  // The last `window` bytes, doubled until they hold `count` events or reach the header: a
  // line cut at the window's start is not parsed, and each round re-reads at most as much as
  // the final one.
  size_t body_start = header_end + 1;
  for (size_t window = 64 << 10;; window *= 2) {
    size_t start = size > body_start + window ? size - window : body_start;
    Result<std::string> text = read_at(static_cast<off_t>(start), size - start);
    if (!text) return text.error();
    size_t last_newline = text->rfind('\n');
    text->resize(last_newline == std::string::npos ? 0 : last_newline + 1);  // a writer mid-line
    size_t first = 0;
    if (start > body_start) {  // the window's first line may be cut: skip to the next one
      size_t newline = text->find('\n');
      first = newline == std::string::npos ? text->size() : newline + 1;
    }
    std::vector<std::string_view> lines;
    for (size_t at = first; at < text->size();) {
      size_t newline = text->find('\n', at);
      lines.emplace_back(text->data() + at, newline - at);
      at = newline + 1;
    }
    std::vector<T> newest_first;
    std::vector<EventLineError> errors;
    for (auto line = lines.rbegin(); line != lines.rend() && newest_first.size() < count; ++line) {
      if (line->find_first_not_of(" \t\r") == std::string_view::npos) continue;
      Result<T> event = parse_logged_event(*line);
      if (event) {
        newest_first.push_back(std::move(*event));
      } else {
        errors.push_back({path, 0, event.error().message, shown_line(*line)});
      }
    }
    if (newest_first.size() < count && start > body_start) continue;  // look further back
    if (on_error) {
      for (auto error = errors.rbegin(); error != errors.rend(); ++error) on_error(*error);
    }
    return std::vector<T>(std::make_move_iterator(newest_first.rbegin()),
                          std::make_move_iterator(newest_first.rend()));
  }
}

}  // namespace

std::optional<int64_t> LoggedEvent::wall_ms() const { return parse_timestamp_utc(ts); }

nlohmann::json to_json(const LoggedEvent& event) {
  nlohmann::json out = events::to_json(event.event);
  out["ts"] = event.ts;
  if (event.gen && !out.contains("gen")) out["gen"] = *event.gen;
  return out;
}

std::string EventLineError::message() const {
  std::string where = line > 0 ? path + ":" + std::to_string(line) + ": skipped a corrupt line ("
                               : path + ": skipped a corrupt line near the end (";
  return where + problem + "): '" + text + "'";
}

Result<LoggedEvent> to_logged_event(const nlohmann::json& object) {
  Result<events::Event> event = events::parse_event(object);
  if (!event) return Error::infra(event.error().message);
  std::optional<int> gen;
  if (std::optional<int64_t> stamped = json_int(object, "gen"); stamped && *stamped >= INT_MIN && *stamped <= INT_MAX) {
    gen = static_cast<int>(*stamped);
  }
  return LoggedEvent{json_string(object, "ts"), gen, std::move(*event)};
}

Result<LoggedEvent> parse_logged_event(std::string_view line) {
  Result<EventRecord> record = parse_event_line(line);
  if (!record) return record.error();
  return to_logged_event(record->event);
}

Result<std::vector<LoggedEvent>> read_logged_events(const std::string& path, const EventErrorSink& on_error) {
  return read_all(path, on_error);
}

Result<std::vector<LoggedEvent>> read_last_logged_events(const std::string& path, size_t count,
                                                         const EventErrorSink& on_error) {
  return read_last(path, count, on_error);
}

Result<std::vector<std::pair<int64_t, std::string>>> EventFollower::next_lines() {
  // A bad header means this is not our log (or a newer one): the error stays.
  if (failure_) return *failure_;
  std::vector<std::pair<int64_t, std::string>> numbered;
  // Loop so that one call returns everything present, however large.
  for (;;) {
    Result<std::vector<std::string>> lines = lines_.poll();
    if (!lines) return lines.error();
    if (lines->empty()) return numbered;
    for (std::string& line : *lines) {
      ++line_number_;
      if (line_number_ == 1) {
        if (Status header = check_header(lines_.path(), line); !header) {
          failure_ = header.error();
          return header.error();
        }
        continue;
      }
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;  // blank line
      numbered.emplace_back(line_number_, std::move(line));
    }
  }
}

void EventFollower::skipped(int64_t line_number, const std::string& line, const Error& why,
                            const EventErrorSink& on_error) {
  // One bad line (a disk that filled mid-write, a hand edit) must not hide the rest of the
  // run's history from status and resume.
  ++skipped_lines_;
  EventLineError error{lines_.path(), line_number, why.message, shown_line(line)};
  if (on_error) on_error(error);
}

Result<std::vector<LoggedEvent>> EventFollower::poll_events(const EventErrorSink& on_error) {
  Result<std::vector<std::pair<int64_t, std::string>>> lines = next_lines();
  if (!lines) return lines.error();
  std::vector<LoggedEvent> events;
  for (const auto& [number, line] : *lines) {
    Result<LoggedEvent> event = parse_logged_event(line);
    if (event) events.push_back(std::move(*event));
    else skipped(number, line, event.error(), on_error);
  }
  return events;
}

std::optional<int64_t> event_wall_ms(const nlohmann::json& event) {
  const nlohmann::json* ts = json_member(event, "ts");
  if (!ts || !ts->is_string()) return std::nullopt;
  return parse_timestamp_utc(ts->get_ref<const std::string&>());
}

}  // namespace dtrain
