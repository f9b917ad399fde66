#include "launcher/drill/live_drill.h"

#include <signal.h>

#include <algorithm>
#include <atomic>
#include <optional>
#include <set>
#include <thread>

#include "launcher/base/clock.h"
#include "launcher/drill/injector.h"
#include "launcher/drill/run_processes.h"
#include "launcher/runlog/json_access.h"
#include "launcher/runlog/run_state.h"

namespace dtrain::drill {

using nlohmann::json;

namespace {

constexpr auto kPoll = std::chrono::milliseconds(50);
/// How long the old generation's processes may take to be reaped once the new one trains.
constexpr Millis kGoneGrace{3000};

std::atomic<bool> g_cancel{false};

std::string name_of(const json& event) { return json_string(event, "ev"); }

/// The current generation's workers, from its worker.started events (authoritative: state.json
/// is a snapshot written at most twice a second).
struct GenerationView {
  int generation = -1;
  std::vector<int> pids;
  std::set<std::string> hosts;
  std::optional<int> rank_pid(int rank, const std::vector<json>& events) const {
    for (auto it = events.rbegin(); it != events.rend(); ++it) {
      if (name_of(*it) == "worker.started" && json_int(*it, "gen") == generation && json_int(*it, "rank") == rank) {
        return static_cast<int>(json_int(*it, "pid").value_or(0));
      }
    }
    return std::nullopt;
  }
};

GenerationView view_of(const LiveRun& run) {
  GenerationView view;
  view.generation = run.generation();
  for (const json& event : run.events()) {
    if (name_of(event) == "worker.started" && json_int(event, "gen") == view.generation) {
      view.pids.push_back(static_cast<int>(json_int(event, "pid").value_or(0)));
      view.hosts.insert(json_string(event, "host"));
    }
  }
  return view;
}

/// The lowest step over all ranks when every rank runs and has reported one; else nullopt.
std::optional<int64_t> min_rank_step(const json& state) {
  const json* ranks = json_member(state, "ranks");
  if (!ranks || !ranks->is_array() || ranks->empty()) return std::nullopt;
  std::optional<int64_t> lowest;
  for (const json& rank : *ranks) {
    auto step = json_int(rank, "step");
    if (json_string(rank, "state") != "running" || !step) return std::nullopt;
    lowest = lowest ? std::min(*lowest, *step) : *step;
  }
  return lowest;
}

bool committed_since(const LiveRun& run, size_t from, int generation, int64_t* step) {
  for (size_t i = from; i < run.events().size(); ++i) {
    const json& event = run.events()[i];
    if (name_of(event) == "checkpoint.committed" && json_int(event, "gen") == generation) {
      *step = json_int(event, "step").value_or(-1);
      return true;
    }
  }
  return false;
}

struct Ready {
  GenerationView view;
  int64_t step = 0;
};

// Steady: the run says "running", every rank of the current generation runs and has made
// progress since the drill first saw it (or reached at_step). corrupt-checkpoint also waits for
// a fresh commit, so the next one is as far away as it can be when the newest is damaged.
Result<Ready> wait_until_ready(LiveRun& run, const Fault& fault, Deadline deadline, const Say& say) {
  std::optional<int64_t> baseline;
  int baseline_generation = -2;
  std::optional<size_t> commit_watch_from;
  bool said_waiting = false;
  for (;;) {
    if (cancel_requested()) return Error::infra("cancelled before the fault was injected");
    if (Status polled = run.poll(); !polled) return polled.error();
    Result<json> state = run.state();
    if (state) {
      if (std::string reason = not_live_reason(*state); !reason.empty()) {
        return Error::infra("run " + run.id() + " " + reason + " before " + fault.label() + " could be injected");
      }
      int generation = run.generation();
      std::optional<int64_t> step = min_rank_step(*state);
      bool running = json_string(*state, "state") == "running" &&
                     json_int(*state, "generation").value_or(-1) == generation;
      if (running && step) {
        if (generation != baseline_generation) {
          baseline_generation = generation;
          baseline = step;
          commit_watch_from.reset();
        }
        bool at = fault.at_step ? *step >= *fault.at_step : *step >= *baseline + 2;
        if (at && fault.kind == FaultKind::corrupt_checkpoint) {
          if (!commit_watch_from) commit_watch_from = run.events().size();
          int64_t committed = -1;
          at = committed_since(run, *commit_watch_from, generation, &committed) &&
               complete_checkpoint_steps(run.checkpoint_dir()).size() >= 2;
          if (!at && committed >= 0) commit_watch_from = run.events().size();  // wait for the next one
        }
        if (at) return Ready{view_of(run), *step};
      }
      if (!said_waiting && say) {
        say(fault.at_step ? "waiting for every rank to reach step " + std::to_string(*fault.at_step)
                          : "waiting until " + run.id() + " trains steadily");
        said_waiting = true;
      }
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      return Error::infra("run " + run.id() + " was not training steadily" +
                          (fault.at_step ? " at step " + std::to_string(*fault.at_step) : std::string()) +
                          " before the drill's deadline; give it more time with --timeout");
    }
    std::this_thread::sleep_for(kPoll);
  }
}

}  // namespace

void request_cancel() { g_cancel.store(true); }
bool cancel_requested() { return g_cancel.load(); }

Status check_fault_fits(const LiveRun& run, const Fault& fault) {
  if (!is_implemented(fault.kind)) {
    return Error::infra(std::string(to_string(fault.kind)) + " is not implemented yet");
  }
  if (fault.kind == FaultKind::slow_storage) {
    return Error::user("slow-storage cannot be injected into a running job: the delay is set when the job starts. "
                       "Drill it with `dtrain drill --spec drill.yaml` (faults: [{fault: slow-storage, delay: 2s}])");
  }
  if (fault.rank) {
    Result<json> state = run.state();
    auto world = state ? json_int(*state, "world_size") : std::nullopt;
    if (world && *fault.rank >= *world) {
      return Error::user("--fault " + fault.label() + ": run " + run.id() + " has ranks 0-" + std::to_string(*world - 1) +
                         "; pick one of them");
    }
  }
  return {};
}

Result<FaultRecord> inject_and_follow(LiveRun& run, const Fault& fault, Deadline deadline, const Say& say) {
  Result<Ready> ready = wait_until_ready(run, fault, deadline, say);
  if (!ready) return ready.error();
  FaultRecord record;
  Injection& injection = record.injection;
  injection.fault = fault;
  injection.generation = ready->view.generation;
  injection.hosts.assign(ready->view.hosts.begin(), ready->view.hosts.end());
  injection.at_step = ready->step;
  int rank = fault.rank.value_or(0);
  std::optional<int> pid = ready->view.rank_pid(rank, run.events());
  if (!pid || *pid <= 0) return Error::internal("no worker.started for rank " + std::to_string(rank) + " in generation " +
                                                std::to_string(injection.generation));
  injection.pid = *pid;

  if (fault.kind == FaultKind::corrupt_checkpoint) {
    Result<CorruptedCheckpoint> corrupted = corrupt_newest_checkpoint(run.checkpoint_dir());
    if (!corrupted) return corrupted.error();
    injection.corrupted_step = corrupted->step;
    injection.corrupted_file = corrupted->file;
  }
  size_t events_before = run.events().size();
  injection.wall_ms = SystemClock().wall_ms();
  int signal = fault.kind == FaultKind::hang_rank ? SIGSTOP : SIGKILL;
  if (Status sent = send_signal(injection.pid, signal); !sent) return sent.error();

  json injected = {{"ev", "drill.injected"}, {"fault", to_string(fault.kind)}, {"target", fault.target},
                   {"pid", injection.pid}, {"at_step", injection.at_step}, {"gen", injection.generation}};
  if (injection.corrupted_step) {
    injected["corrupted_step"] = *injection.corrupted_step;
    injected["corrupted_file"] = injection.corrupted_file;
  }
  if (Status appended = run.append(injected); !appended && say) say("warning: " + appended.error().message);
  if (say) {
    say("injected " + fault.label() + " (pid " + std::to_string(injection.pid) + ", step " +
        std::to_string(injection.at_step) + ", generation " + std::to_string(injection.generation) + ")" +
        (injection.corrupted_step ? " after damaging checkpoint step " + std::to_string(*injection.corrupted_step) : ""));
  }

  for (;;) {
    if (Status polled = run.poll(); !polled) return polled.error();
    for (size_t i = events_before; i < run.events().size(); ++i) {
      std::string name = name_of(run.events()[i]);
      if (name == "recovery.completed") record.recovered = true;
      if (name == "run.finished") record.run_ended = true;
    }
    if (record.recovered || record.run_ended) break;
    Result<json> state = run.state();
    if (state && !not_live_reason(*state).empty()) {
      record.run_ended = true;
      break;
    }
    if (cancel_requested() || std::chrono::steady_clock::now() >= deadline) break;
    std::this_thread::sleep_for(kPoll);
  }
  record.surviving_pids = wait_until_gone(ready->view.pids, kGoneGrace);
  if (fault.kind == FaultKind::hang_rank && process_alive(injection.pid)) {
    // Never leave a worker frozen by the drill behind: the run would hang for good.
    (void)send_signal(injection.pid, SIGCONT);
    if (say) say("the stopped worker (pid " + std::to_string(injection.pid) + ") was never replaced; sent it SIGCONT");
  }
  (void)run.poll();
  Result<json> state_after = run.state();
  record.state_after = state_after ? json_string(*state_after, "state", "unknown") : "unknown";
  record.events_after.assign(run.events().begin() + static_cast<std::ptrdiff_t>(events_before), run.events().end());
  if (say) {
    say(record.recovered ? "recovered" : record.run_ended ? "the run ended before it recovered" : "no recovery before the deadline");
  }
  return record;
}

std::string wait_for_run_end(LiveRun& run, Deadline deadline) {
  for (;;) {
    (void)run.poll();
    Result<json> state = run.state();
    if (state) {
      std::string name = json_string(*state, "state", "unknown");
      if (is_terminal_state(name)) return name;
      if (!supervisor_alive(*state)) return "supervisor gone";
    }
    if (cancel_requested() || std::chrono::steady_clock::now() >= deadline) {
      return state ? json_string(*state, "state", "unknown") : "unknown";
    }
    std::this_thread::sleep_for(kPoll);
  }
}

}  // namespace dtrain::drill
