// kill-supervisor (see host_drill.h): SIGKILL the supervisor, prove every agent fences within
// heartbeat.timeout + 5 s, then `dtrain resume RUN --detach` and follow the resumed run until
// its recovery.completed {kind: "supervisor.lost"}.

#include <signal.h>
#include <unistd.h>

#include <climits>
#include <thread>

#include "launcher/base/clock.h"
#include "launcher/base/strings.h"
#include "launcher/base/child_process.h"
#include "launcher/drill/host_drill.h"
#include "launcher/drill/injector.h"
#include "launcher/hosts/run_hosts.h"
#include "launcher/drill/run_processes.h"
#include "launcher/events/events.h"

namespace dtrain::drill {

using hosts::RunHosts;
using hosts::this_host_name;

using nlohmann::json;

namespace {

/// Slack past heartbeat.timeout for the agents' own TERM → KILL of their workers.
constexpr Millis kFenceSlack{5000};

std::string this_executable() {
  char path[PATH_MAX];
  ssize_t length = ::readlink("/proc/self/exe", path, sizeof path - 1);
  return length > 0 ? std::string(path, static_cast<size_t>(length)) : std::string();
}

struct Fence {
  std::optional<int64_t> wall_ms;  ///< when the drill saw every agent and worker gone
  std::string left;                ///< what was still running at the bound, when not fenced
};

// The agent and its workers of every host: from /proc here for a local host, over SSH (one
// command per host and poll) for a remote one, where still_running() also makes sure a pid
// still belongs to the run. Polled until all are gone or the bound passes.
Fence wait_for_fence(const RunHosts& hosts, const GenerationView& view, const std::string& run_id,
                     int64_t injected_wall_ms, Millis bound) {
  std::map<std::string, std::vector<int>> waiting;
  for (const auto& [host, pids] : view.pids_by_host) {
    std::vector<int> all = pids;
    if (std::optional<int> agent = hosts.agent_pid(host)) all.push_back(*agent);
    waiting[host] = all;
  }
  Fence fence;
  SystemClock clock;
  for (;;) {
    fence.left.clear();
    for (auto it = waiting.begin(); it != waiting.end();) {
      std::vector<int> alive;
      if (hosts.is_local(it->first)) {
        for (int pid : it->second) {
          if (process_alive(pid)) alive.push_back(pid);
        }
      } else if (Result<std::vector<int>> running = hosts.still_running(it->first, it->second, run_id)) {
        alive = *running;
      } else {
        alive = it->second;  // unreachable for now: not proven gone
      }
      if (alive.empty()) {
        it = waiting.erase(it);
        continue;
      }
      for (int pid : alive) fence.left += (fence.left.empty() ? "" : ", ") + it->first + " pid " + std::to_string(pid);
      ++it;
    }
    if (waiting.empty()) {
      fence.wall_ms = clock.wall_ms();
      return fence;
    }
    if (clock.wall_ms() >= injected_wall_ms + bound.count() || cancel_requested()) return fence;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

}  // namespace

Result<FaultRecord> inject_supervisor_kill(LiveRun& run, const Fault& fault, const Ready& ready, Deadline deadline,
                                           const Say& say) {
  Result<RunHosts> opened = RunHosts::open(run.directory());
  if (!opened) return opened.error();
  const RunHosts& hosts = *opened;
  Result<RunSnapshot> state = run.state();
  if (!state) return state.error();
  int pid = state->supervisor ? state->supervisor->pid : 0;
  std::string supervisor_host = state->supervisor ? state->supervisor->hostname : "";
  if (pid <= 1) return Error::infra("kill-supervisor: state.json of run " + run.id() + " names no supervisor pid");
  if (!supervisor_host.empty() && supervisor_host != this_host_name()) {
    return Error::infra("kill-supervisor: run " + run.id() + " is supervised from host " + supervisor_host +
                        "; run the drill there");
  }
  std::string dtrain = this_executable();
  if (dtrain.empty()) return Error::infra("kill-supervisor: cannot find this dtrain through /proc/self/exe to resume with");

  FaultRecord record;
  Injection& injection = record.injection;
  injection.fault = fault;
  injection.generation = ready.view.generation;
  for (const auto& [name, pids] : ready.view.pids_by_host) injection.hosts.push_back(name);
  injection.at_step = ready.step;
  injection.pid = pid;
  size_t events_before = run.events().size();
  injection.wall_ms = SystemClock().wall_ms();
  if (Status sent = send_signal(run, pid, SIGKILL); !sent) return sent.error();
  events::DrillInjected injected{to_string(fault.kind), "", pid, injection.at_step, injection.generation};
  if (Status appended = run.append(injected.to_json()); !appended && say) say("warning: " + appended.error().message);
  if (say) {
    say("injected kill-supervisor (pid " + std::to_string(pid) + ", step " + std::to_string(injection.at_step) +
        ", generation " + std::to_string(injection.generation) + "); waiting for the agents to fence");
  }

  Millis bound = hosts.spec().heartbeat.timeout + kFenceSlack;
  Fence fence = wait_for_fence(hosts, ready.view, run.id(), injection.wall_ms, bound);
  record.detected_wall_ms = fence.wall_ms;
  record.detected_by = "agents fenced";
  record.checks.push_back(
      {"agents fenced", fence.wall_ms.has_value(),
       fence.wall_ms ? "every agent and worker of generation " + std::to_string(injection.generation) + " gone " +
                           std::to_string(*fence.wall_ms - injection.wall_ms) + "ms after the kill (bound: " +
                           "heartbeat.timeout + 5s = " + format_duration(bound) + ")"
                     : "still running " + format_duration(bound) + " after the kill: " + fence.left});
  if (say) say(fence.wall_ms ? "every agent fenced" : "the agents did not all fence: " + fence.left);

  // `dtrain resume` itself waits until the old agents must have fenced.
  std::vector<std::string> argv = {dtrain, "resume", run.id(), "--detach"};
  if (say) say("resuming: " + join(argv, " "));
  Millis resume_timeout = 2 * hosts.spec().heartbeat.timeout + Millis(60'000);
  Result<CommandOutput> resumed = run_command(argv, resume_timeout);
  bool started = resumed && resumed->exit_code == 0;
  record.checks.push_back(
      {"dtrain resume started", started,
       !resumed ? resumed.error().message
       : started ? "`dtrain resume " + run.id() + " --detach` started the resumed supervisor"
                 : "`dtrain resume " + run.id() + " --detach` failed (exit " + std::to_string(resumed->exit_code) +
                       "): " + std::string(trim(resumed->err))});
  if (started) {
    FollowResult followed = follow_recovery(run, events_before, deadline, true, [](const events::RecoveryCompleted& recovery) {
      return recovery.kind == events::FailureKind::supervisor_lost;
    });
    record.recovered = followed.recovered;
    record.run_ended = followed.run_ended;
  }
  if (say) say(record.recovered ? "recovered" : "the resumed run did not recover");

  // The old generation's workers must all be gone, wherever they ran.
  for (const auto& [host, pids] : ready.view.pids_by_host) {
    if (hosts.is_local(host)) {
      for (int alive : wait_until_gone(pids, Millis(3000))) record.surviving_pids.push_back(alive);
    } else if (Result<std::vector<int>> running = hosts.still_running(host, pids, run.id())) {
      record.surviving_pids.insert(record.surviving_pids.end(), running->begin(), running->end());
    } else if (say) {
      say("warning: could not check " + host + " for workers of generation " + std::to_string(injection.generation) +
          ": " + running.error().message);
    }
  }
  (void)run.poll();
  record.state_after = recorded_state(run.state());
  record.events_after.assign(run.events().begin() + static_cast<std::ptrdiff_t>(events_before), run.events().end());
  return record;
}

}  // namespace dtrain::drill
