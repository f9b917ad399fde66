#include "launcher/runlog/run_state.h"

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <unistd.h>

#include "launcher/base/fd.h"
#include "launcher/base/regular_file.h"

namespace dtrain {

bool is_terminal_state(std::string_view state) {
  return state == "succeeded" || state == "failed" || state == "stopped" || state == "preempted";
}

Status write_state(const RunDirectory& run, const RunSnapshot& snapshot) {
  return write_state_file(run.state_path(), snapshot);
}

Status write_state_file(const std::string& path, const RunSnapshot& snapshot) {
  return write_file_atomic(path, snapshot.text());
}

Result<RunSnapshot> read_state(const RunDirectory& run) { return read_state_file(run.state_path()); }

Result<RunSnapshot> read_state_file(const std::string& path) {
  if (::access(path.c_str(), F_OK) != 0 && errno == ENOENT) {
    return Error::infra(path + ": no state yet (the supervisor writes it once the run starts)");
  }
  Result<std::string> text = read_regular_file(path, kMaxStateFileBytes, FollowLinks::kNo,
                                              "state.json is written by dtrain and far smaller; restore the run's own");
  if (!text) return text.error();
  if (std::optional<RunSnapshot> plain = read_plain_state(*text)) return std::move(*plain);
  nlohmann::json state = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (state.is_discarded() || !state.is_object()) {
    return Error::infra(path + ": not a JSON object; the file is damaged (it is written "
                               "atomically, so something else changed it)");
  }
  Result<RunSnapshot> snapshot = RunSnapshot::from_json(state);
  if (!snapshot) return Error(snapshot.error().kind, path + ": " + snapshot.error().message);
  return snapshot;
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

bool supervisor_alive(const RunSnapshot& state) {
  if (!state.supervisor) return false;
  int pid = state.supervisor->pid;
  if (pid <= 0 || pid > 0x3fffffff) return false;
  const std::string& hostname = state.supervisor->hostname;
  char here[256] = {};
  if (!hostname.empty() && ::gethostname(here, sizeof here - 1) == 0 && hostname != here) {
    return true;  // another host's process table: we cannot prove it gone
  }
  std::optional<int64_t> ticks = process_start_ticks(static_cast<pid_t>(pid));
  if (!ticks) return false;
  std::optional<int64_t> recorded = state.supervisor->proc_start_ticks;
  return !recorded || *recorded == *ticks;
}

std::string recorded_state(const RunSnapshot& state) { return state.state.empty() ? "unknown" : state.state; }

std::string display_state(const RunSnapshot& state, bool alive) {
  if (state.state.empty()) return "unknown";
  if (!is_terminal_state(state.state) && !alive) return "supervisor gone";
  return state.state;
}

}  // namespace dtrain
