#include "launcher/drill/live_drill.h"

#include <signal.h>

#include <algorithm>
#include <limits>
#include <optional>
#include <thread>

#include "launcher/base/clock.h"
#include "launcher/drill/host_drill.h"
#include "launcher/drill/injector.h"
#include "launcher/hosts/run_hosts.h"
#include "launcher/drill/run_processes.h"
#include "launcher/runlog/run_state.h"
#include "launcher/events/events.h"

namespace dtrain::drill {

using hosts::RunHosts;
using hosts::this_host_name;

using nlohmann::json;

namespace {

constexpr auto kPoll = std::chrono::milliseconds(50);
/// How long the old generation's processes may take to be reaped once the new one trains.
constexpr Millis kGoneGrace{3000};


// Host faults need the host in the run's spec, and the drill must be able to reach it.
Status check_host_fits(const LiveRun& run, const Fault& fault) {
  Result<RunHosts> hosts = RunHosts::open(run.directory());
  if (!hosts) return hosts.error();
  if (!hosts->entry(fault.target)) {
    std::string names;
    for (const std::string& name : hosts->names()) names += (names.empty() ? "" : ", ") + name;
    return Error::user("--fault " + fault.label() + ": run " + run.id() + " has no host '" + fault.target +
                       "'; its hosts are " + names);
  }
  return {};
}

Status check_supervisor_here(const LiveRun& run) {
  Result<RunSnapshot> state = run.state();
  if (!state) return state.error();
  std::string host = state->supervisor ? state->supervisor->hostname : "";
  if (!host.empty() && host != this_host_name()) {
    return Error::infra("kill-supervisor: run " + run.id() + " is supervised from host " + host + ", not " +
                        this_host_name() + "; run the drill there (it must signal the supervisor and then run "
                        "`dtrain resume` on that machine)");
  }
  return {};
}

/// corrupt-checkpoint, after the kill: a save already under way when the drill damaged the
/// newest step can still commit a newer one before the supervisor has stopped the generation,
/// and the run would then resume from that good step and never read the damage (a flaky pass
/// of nothing). Until the next generation is planned (every process of this one is gone by
/// then, and the supervisor ignores its commits), any newer complete step is damaged too, and
/// the run log says so (drill.corrupted). The new generation's workers only start after the
/// plan, so they read damaged checkpoints.
void keep_newest_damaged(LiveRun& run, const Injection& injection, int64_t newest_damaged, size_t events_before,
                         Deadline deadline, const Say& say) {
  auto planned = [&] {
    const std::vector<LoggedEvent>& events = run.events();
    for (size_t i = events_before; i < events.size(); ++i) {
      if (std::holds_alternative<events::RunFinished>(events[i].event)) return true;
      if (std::holds_alternative<events::PlanGeneration>(events[i].event) &&
          events[i].gen.value_or(-1) > injection.generation) {
        return true;
      }
    }
    return false;
  };
  for (;;) {
    (void)run.poll();
    bool last_look = planned() || std::chrono::steady_clock::now() >= deadline || cancel_requested();
    std::vector<int64_t> steps = complete_checkpoint_steps(run.checkpoint_dir());
    if (!steps.empty() && steps.front() > newest_damaged) {
      Result<CorruptedCheckpoint> more = corrupt_newest_checkpoint(run.checkpoint_dir());
      if (more) {
        // corrupted_step stays the oldest damaged step: the grading's lower bound.
        newest_damaged = more->step;
        (void)run.append(
            events::DrillCorrupted{more->step, more->file, "committed after the drill damaged the newest checkpoint"}
                .to_json());
        if (say) say("step " + std::to_string(more->step) + " committed meanwhile; damaged it too");
      } else if (say) {
        say("warning: " + more.error().message);
      }
    }
    if (last_look) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

}  // namespace

GradeContext FaultRecord::context() const {
  GradeContext context;
  context.final_state = state_after;
  context.surviving_pids = surviving_pids;
  context.detected_wall_ms = detected_wall_ms;
  context.detected_by = detected_by;
  context.extra_checks = checks;
  return context;
}

FollowResult follow_recovery(LiveRun& run, size_t events_before, Deadline deadline, bool supervisor_may_be_gone,
                             const std::function<bool(const events::RecoveryCompleted&)>& is_recovery) {
  FollowResult result;
  for (;;) {
    if (Status polled = run.poll(); !polled) {
      result.error = polled.error().message;
      return result;
    }
    for (size_t i = events_before; i < run.events().size(); ++i) {
      const events::Event& event = run.events()[i].event;
      const auto* completed = std::get_if<events::RecoveryCompleted>(&event);
      if (completed && (!is_recovery || is_recovery(*completed))) result.recovered = true;
      if (std::holds_alternative<events::RunFinished>(event)) result.run_ended = true;
    }
    if (result.recovered || result.run_ended) return result;
    Result<RunSnapshot> state = run.state();
    if (state && !supervisor_may_be_gone && !not_live_reason(*state).empty()) {
      result.run_ended = true;
      return result;
    }
    if (cancel_requested() || std::chrono::steady_clock::now() >= deadline) return result;
    std::this_thread::sleep_for(kPoll);
  }
}

Status check_fault_fits(const LiveRun& run, const Fault& fault) {
  if (!is_implemented(fault.kind)) {
    return Error::infra(std::string(to_string(fault.kind)) + " is not implemented yet");
  }
  if (fault.kind == FaultKind::slow_storage) {
    return Error::user("slow-storage cannot be injected into a running job: the delay is set when the job starts. "
                       "Drill it with `dtrain drill --spec drill.yaml` (faults: [{fault: slow-storage, delay: 2s}])");
  }
  if (fault.kind == FaultKind::kill_host || fault.kind == FaultKind::partition_host) {
    if (Status partition = check_partition_settings(fault, "--fault " + fault.label()); !partition) return partition;
    return check_host_fits(run, fault);
  }
  if (fault.kind == FaultKind::kill_supervisor) return check_supervisor_here(run);
  if (fault.rank) {
    Result<RunSnapshot> state = run.state();
    int world = state ? state->world_size : 0;
    if (world > 0 && *fault.rank >= world) {
      return Error::user("--fault " + fault.label() + ": run " + run.id() + " has ranks 0-" +
                         std::to_string(world - 1) + "; pick one of them");
    }
  }
  return {};
}

Result<FaultRecord> inject_and_follow(LiveRun& run, const Fault& fault, Deadline deadline, const Say& say) {
  Result<Ready> ready = wait_until_ready(run, fault, deadline, say);
  if (!ready) return ready.error();
  if (fault.kind == FaultKind::kill_host || fault.kind == FaultKind::partition_host) {
    return inject_host_fault(run, fault, *ready, deadline, say);
  }
  if (fault.kind == FaultKind::kill_supervisor) return inject_supervisor_kill(run, fault, *ready, deadline, say);
  FaultRecord record;
  Injection& injection = record.injection;
  injection.fault = fault;
  injection.generation = ready->view.generation;
  for (const auto& [host, pids] : ready->view.pids_by_host) injection.hosts.push_back(host);
  injection.at_step = ready->step;
  int rank = fault.rank.value_or(0);
  std::optional<int> pid = ready->view.rank_pid(rank, run.events());
  if (!pid || *pid <= 0) return Error::internal("no worker.started for rank " + std::to_string(rank) + " in generation " +
                                                std::to_string(injection.generation));
  injection.pid = *pid;

  int64_t newest_damaged = 0;
  if (fault.kind == FaultKind::corrupt_checkpoint) {
    // From the newest step the run log has seen committed (what the supervisor will name, or
    // newer) up to the newest on disk: every step the restart could be told to load is damaged.
    int64_t newest_logged = std::numeric_limits<int64_t>::max();
    for (const LoggedEvent& event : run.events()) {
      const auto* committed = std::get_if<events::CheckpointCommitted>(&event.event);
      if (!committed) continue;
      newest_logged = newest_logged == std::numeric_limits<int64_t>::max() ? committed->step
                                                                          : std::max(newest_logged, committed->step);
    }
    Result<std::vector<CorruptedCheckpoint>> corrupted = corrupt_checkpoints_from(run.checkpoint_dir(), newest_logged);
    if (!corrupted) return corrupted.error();
    // The oldest step damaged: a resume must go below it, and a rejection names it or a newer one.
    injection.corrupted_step = corrupted->back().step;
    injection.corrupted_file = corrupted->back().file;
    newest_damaged = corrupted->front().step;
    for (size_t i = 0; i + 1 < corrupted->size(); ++i) {
      (void)run.append(events::DrillCorrupted{(*corrupted)[i].step, (*corrupted)[i].file,
                                              "complete on disk but not yet in the run log: damaged too"}
                           .to_json());
    }
  }
  size_t events_before = run.events().size();
  injection.wall_ms = SystemClock().wall_ms();
  int signal = fault.kind == FaultKind::hang_rank ? SIGSTOP : SIGKILL;
  if (Status sent = send_signal(run, injection.pid, signal); !sent) return sent.error();

  events::DrillInjected injected{to_string(fault.kind), fault.target, injection.pid, injection.at_step,
                                 injection.generation};
  injected.corrupted_step = injection.corrupted_step;
  injected.corrupted_file = injection.corrupted_file;
  if (Status appended = run.append(injected.to_json()); !appended && say) say("warning: " + appended.error().message);
  if (say) {
    say("injected " + fault.label() + " (pid " + std::to_string(injection.pid) + ", step " +
        std::to_string(injection.at_step) + ", generation " + std::to_string(injection.generation) + ")" +
        (injection.corrupted_step ? " after damaging checkpoint step " + std::to_string(*injection.corrupted_step) : ""));
  }

  if (injection.corrupted_step) keep_newest_damaged(run, injection, newest_damaged, events_before, deadline, say);

  FollowResult followed = follow_recovery(run, events_before, deadline, false, nullptr);
  if (followed.error) return Error::infra(*followed.error);
  record.recovered = followed.recovered;
  record.run_ended = followed.run_ended;
  // Survivors an in-place recovery carried over live on by design: do not wait for them.
  (void)run.poll();
  std::vector<LoggedEvent> after(run.events().begin() + static_cast<std::ptrdiff_t>(events_before), run.events().end());
  std::vector<int> carried = carried_over_pids(after, injection.generation);
  std::vector<int> watched;
  for (int pid : ready->view.pids) {
    if (std::find(carried.begin(), carried.end(), pid) == carried.end()) watched.push_back(pid);
  }
  record.surviving_pids = wait_until_gone(watched, kGoneGrace);
  if (fault.kind == FaultKind::hang_rank && process_alive(injection.pid)) {
    // Never leave a worker frozen by the drill behind: the run would hang for good.
    (void)send_signal(run, injection.pid, SIGCONT);
    if (say) say("the stopped worker (pid " + std::to_string(injection.pid) + ") was never replaced; sent it SIGCONT");
  }
  (void)run.poll();
  record.state_after = recorded_state(run.state());
  record.events_after.assign(run.events().begin() + static_cast<std::ptrdiff_t>(events_before), run.events().end());
  if (say) {
    say(record.recovered ? "recovered" : record.run_ended ? "the run ended before it recovered" : "no recovery before the deadline");
  }
  return record;
}

std::string wait_for_run_end(LiveRun& run, Deadline deadline) {
  for (;;) {
    (void)run.poll();
    Result<RunSnapshot> state = run.state();
    if (state) {
      if (is_terminal_state(state->state)) return state->state;
      if (!supervisor_alive(*state)) return "supervisor gone";
    }
    if (cancel_requested() || std::chrono::steady_clock::now() >= deadline) return recorded_state(state);
    std::this_thread::sleep_for(kPoll);
  }
}

}  // namespace dtrain::drill
