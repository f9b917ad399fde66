#include "launcher/drill/live_run.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <thread>

#include "launcher/base/clock.h"
#include "launcher/base/fd.h"
#include "launcher/runlog/event_log.h"
#include "launcher/runlog/run_state.h"
#include "launcher/events/event_catalogue.h"

namespace dtrain::drill {

using nlohmann::json;

namespace {
/// How long LiveRun::open waits for a just-submitted run's first state.json.
constexpr std::chrono::seconds kStateAppearsWithin{10};
}  // namespace

std::string not_live_reason(const RunSnapshot& state) {
  std::string name = dtrain::recorded_state(state);
  if (is_terminal_state(name)) {
    std::string text = "has ended (" + name;
    if (state.exit_code) text += ", exit " + std::to_string(*state.exit_code);
    return text + ")";
  }
  if (!supervisor_alive(state)) {
    return "has no supervisor any more (pid " + (state.supervisor ? std::to_string(state.supervisor->pid) : "?") +
           " is gone; last recorded state " + name + ")";
  }
  return "";
}

std::string recorded_state(const Result<RunSnapshot>& state) {
  return state ? dtrain::recorded_state(*state) : "unknown";
}

Result<LiveRun> LiveRun::open(std::string_view id_or_prefix) {
  Result<RunDirectory> directory = RunDirectory::open(id_or_prefix);
  if (!directory) return Error::user(directory.error().message);
  // `dtrain submit --detach` returns once the run directory exists; state.json follows within
  // moments. A drill started right after it waits for that instead of calling the run dead.
  const auto deadline = std::chrono::steady_clock::now() + kStateAppearsWithin;
  while (::access(directory->state_path().c_str(), F_OK) != 0 && errno == ENOENT &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  Result<RunSnapshot> state = read_state(*directory);
  if (!state) return Error::user("run " + directory->id() + ": " + state.error().message);
  if (std::string reason = not_live_reason(*state); !reason.empty()) {
    return Error::user("run " + directory->id() + " " + reason +
                       "; a drill needs a running run: start one with `dtrain submit SPEC --detach`, or let the "
                       "drill start its own with `dtrain drill --spec drill.yaml`");
  }
  return LiveRun(std::move(directory).value());
}

Status LiveRun::poll() {
  Result<std::vector<LoggedEvent>> fresh = follower_.poll_events();
  if (!fresh) return fresh.error();
  for (LoggedEvent& event : *fresh) events_.push_back(std::move(event));
  return {};
}

Result<RunSnapshot> LiveRun::state() const { return read_state(directory_); }

Status LiveRun::append(const json& event) const {
  // Whole lines or nothing, between the supervisor's own lines (event_log.h).
  return EventLog::append_to(directory_.events_path(), event, SystemClock().wall_ms());
}

std::string LiveRun::checkpoint_dir() const {
  for (auto it = events_.rbegin(); it != events_.rend(); ++it) {
    if (const auto* spawned = std::get_if<events::GenerationSpawned>(&it->event)) return spawned->checkpoint_dir;
  }
  return "";
}

int LiveRun::generation() const {
  for (auto it = events_.rbegin(); it != events_.rend(); ++it) {
    if (std::holds_alternative<events::PlanGeneration>(it->event)) return it->gen.value_or(-1);
  }
  return -1;
}

}  // namespace dtrain::drill
