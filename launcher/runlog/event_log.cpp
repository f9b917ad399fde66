#include "launcher/runlog/event_log.h"

#include <cerrno>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "launcher/base/clock.h"
#include "launcher/runlog/json_access.h"

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

Result<nlohmann::json> parse_event(const std::string& path, int64_t line_number, std::string_view line) {
  nlohmann::json event = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (event.is_discarded() || !event.is_object()) {
    std::string shown(line.substr(0, 80));
    if (line.size() > 80) shown += "...";
    return Error::infra(path + ":" + std::to_string(line_number) +
                        ": corrupt event line (not a JSON object): '" + shown +
                        "'; the lines before it are intact");
  }
  return event;
}

}  // namespace

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
  if (Status written = write_all(fd.get(), line); !written) {
    return Error::infra(path + ": " + written.error().message);
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

Status EventLog::append(const nlohmann::json& event, int64_t wall_ms) {
  const nlohmann::json* name = json_member(event, "ev");
  if (!name || !name->is_string()) {
    return Error::internal("event without a string \"ev\": " + json_compact(event));
  }
  if (Status written = write_all(fd_.get(), format_event_line(event, wall_ms) + "\n"); !written) {
    return Error::infra(path_ + ": " + written.error().message);
  }
  return {};
}

Result<std::vector<nlohmann::json>> read_events(const std::string& path) {
  if (::access(path.c_str(), F_OK) != 0) return Error::infra(path + ": " + errno_text(errno));
  EventFollower follower(path);
  std::vector<nlohmann::json> events;
  for (;;) {
    Result<std::vector<nlohmann::json>> batch = follower.poll();
    if (!batch) return batch.error();
    if (batch->empty()) break;
    for (nlohmann::json& event : *batch) events.push_back(std::move(event));
  }
  return events;
}

Result<std::vector<nlohmann::json>> EventFollower::poll() {
  // The lines after a bad one cannot be trusted to be numbered right: the error stays.
  if (failure_) return *failure_;
  std::vector<nlohmann::json> events;
  // Loop so that one call returns everything present, however large.
  for (;;) {
    Result<std::vector<std::string>> lines = lines_.poll();
    if (!lines) return lines.error();
    if (lines->empty()) return events;
    for (const std::string& line : *lines) {
      ++line_number_;
      if (line_number_ == 1) {
        if (Status header = check_header(lines_.path(), line); !header) {
          failure_ = header.error();
          return header.error();
        }
        continue;
      }
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;  // blank line
      Result<nlohmann::json> event = parse_event(lines_.path(), line_number_, line);
      if (!event) {
        failure_ = event.error();
        return event.error();
      }
      events.push_back(std::move(*event));
    }
  }
}

}  // namespace dtrain
