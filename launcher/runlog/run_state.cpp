#include "launcher/runlog/run_state.h"

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <unistd.h>

#include "launcher/base/fd.h"
#include "launcher/base/regular_file.h"
#include "launcher/base/json_fields.h"

namespace dtrain {

bool is_terminal_state(std::string_view state) {
  return state == "succeeded" || state == "failed" || state == "stopped";
}

Status write_state(const RunDirectory& run, const nlohmann::json& state) { return write_state_file(run.state_path(), state); }

Status write_state_file(const std::string& path, const nlohmann::json& state) {
  if (!state.is_object()) return Error::internal("write_state: state is not a JSON object");
  std::string text = state.dump(2, ' ', false, nlohmann::json::error_handler_t::replace);
  if (!state.contains("version")) {  // added in front, without copying the whole snapshot
    text.insert(1, "\n  \"version\": " + std::to_string(kRunStateVersion) + (state.empty() ? "" : ","));
  }
  return write_file_atomic(path, text + "\n");
}

Result<nlohmann::json> read_state(const RunDirectory& run) { return read_state_file(run.state_path()); }

Result<nlohmann::json> read_state_file(const std::string& path) {
  if (::access(path.c_str(), F_OK) != 0 && errno == ENOENT) {
    return Error::infra(path + ": no state yet (the supervisor writes it once the run starts)");
  }
  Result<std::string> text = read_regular_file(path, kMaxStateFileBytes, FollowLinks::kNo,
                                              "state.json is written by dtrain and far smaller; restore the run's own");
  if (!text) return text.error();
  nlohmann::json state = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (state.is_discarded() || !state.is_object()) {
    return Error::infra(path + ": not a JSON object; the file is damaged (it is written "
                               "atomically, so something else changed it)");
  }
  std::optional<int64_t> version = json_int(state, "version");
  if (!version) return Error::infra(path + ": no \"version\" field; not a dtrain state file");
  if (*version != kRunStateVersion) {
    return Error::user(path + ": state format version " + std::to_string(*version) +
                       " is not the one this dtrain reads (" + std::to_string(kRunStateVersion) +
                       "); use the dtrain version that wrote the run");
  }
  return state;
}

std::optional<int64_t> process_start_ticks(pid_t pid) {
  if (pid <= 0) return std::nullopt;
  Result<std::string> stat = read_file("/proc/" + std::to_string(pid) + "/stat");
  if (!stat) return std::nullopt;
  // The command name (field 2) is in parentheses and may contain spaces or ')': fields are
  // counted from the last ')'. After it: state (3), ppid (4) ... starttime (22).
  size_t close = stat->rfind(')');
  if (close == std::string::npos) return std::nullopt;
  std::string_view rest = std::string_view(*stat).substr(close + 1);
  int field = 2;
  size_t position = 0;
  while (position < rest.size()) {
    while (position < rest.size() && rest[position] == ' ') ++position;
    size_t end = rest.find(' ', position);
    if (end == std::string_view::npos) end = rest.size();
    ++field;
    std::string_view token = rest.substr(position, end - position);
    if (field == 3 && (token == "Z" || token == "X")) return std::nullopt;  // zombie: it has ended
    if (field == 22) return std::strtoll(std::string(token).c_str(), nullptr, 10);
    position = end;
  }
  return std::nullopt;
}

int64_t current_process_start_ticks() { return process_start_ticks(::getpid()).value_or(0); }

bool supervisor_alive(const nlohmann::json& state) {
  const nlohmann::json* supervisor = json_member(state, "supervisor");
  if (!supervisor) return false;
  std::optional<int64_t> pid = json_int(*supervisor, "pid");
  if (!pid || *pid <= 0 || *pid > 0x3fffffff) return false;
  std::string hostname = json_string(*supervisor, "hostname");
  char here[256] = {};
  if (!hostname.empty() && ::gethostname(here, sizeof here - 1) == 0 && hostname != here) {
    return true;  // another host's process table: we cannot prove it gone
  }
  std::optional<int64_t> ticks = process_start_ticks(static_cast<pid_t>(*pid));
  if (!ticks) return false;
  std::optional<int64_t> recorded = json_int(*supervisor, "proc_start_ticks");
  return !recorded || *recorded == *ticks;
}

std::string display_state(const nlohmann::json& state, bool alive) {
  std::string value = json_string(state, "state");
  if (value.empty()) return "unknown";
  if (!is_terminal_state(value) && !alive) return "supervisor gone";
  return value;
}

}  // namespace dtrain
