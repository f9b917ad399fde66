#include "launcher/run/resume_point.h"

#include "launcher/base/json_fields.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <optional>
#include <set>
#include <string>

#include "launcher/base/clock.h"
#include "launcher/base/duration.h"
#include "launcher/base/fd.h"
#include "launcher/base/strings.h"
#include "launcher/hosts/run_hosts.h"
#include "launcher/runlog/run_state.h"
#include "launcher/events/event.h"

namespace dtrain::run {

using nlohmann::json;

namespace {

/// Whether `pid` is still a `dtrain agent` (and not a reused pid): its argv has "agent".
bool is_agent_process(int pid) {
  if (pid <= 1 || !process_start_ticks(pid)) return false;
  Result<std::string> cmdline = read_file("/proc/" + std::to_string(pid) + "/cmdline");
  if (!cmdline) return false;
  for (const std::string& argument : split(*cmdline, '\0')) {
    if (argument == "agent") return true;
  }
  return false;
}

/// The agents the dead supervisor started on this machine (hosts/<host>.json of local hosts).
std::vector<int> local_agent_pids(const RunDirectory& run, const spec::JobSpec& spec) {
  std::vector<int> pids;
  std::vector<spec::HostEntry> hosts = spec.hosts;
  hosts.insert(hosts.end(), spec.spares.begin(), spec.spares.end());
  for (const spec::HostEntry& host : hosts) {
    if (!host.is_local()) continue;
    Result<std::string> text = run.read_host_facts(host.name);
    if (!text) continue;
    json facts = json::parse(*text, nullptr, false);
    if (json_int(facts, "agent_pid").value_or(0) > 1) pids.push_back(static_cast<int>(*json_int(facts, "agent_pid")));
  }
  return pids;
}

/// Waits until the old agents on the remote hosts are gone, asking each host over SSH (an agent
/// exits only after it has reaped its workers), but never past `fenced_by` (wall ms): by then the
/// silence rule has made every agent fence, so a host that cannot be asked is waited out.
void wait_for_remote_agents(const RunDirectory& run, const std::string& run_id, int64_t fenced_by) {
  SystemClock clock;
  Result<hosts::RunHosts> hosts = hosts::RunHosts::open(run);
  std::map<std::string, int> pending;  // host → old agent pid
  if (hosts) {
    for (const std::string& name : hosts->names()) {
      if (hosts->is_local(name)) continue;
      if (std::optional<int> pid = hosts->agent_pid(name)) pending[name] = *pid;
    }
  }
  while (clock.wall_ms() < fenced_by) {
    if (!hosts) {
      ::usleep(static_cast<useconds_t>(std::max<int64_t>(0, fenced_by - clock.wall_ms()) * 1000));
      return;
    }
    bool unknown = false;
    for (auto it = pending.begin(); it != pending.end();) {
      Result<std::vector<int>> left = hosts->still_running(it->first, {it->second}, run_id);
      if (left && left->empty()) {
        it = pending.erase(it);
      } else {
        unknown = unknown || !left;
        ++it;
      }
    }
    // Hosts that never connected have no agent to wait for; one that cannot be asked is waited out.
    if (pending.empty() && !unknown) return;
    ::usleep(200'000);
  }
}

}  // namespace

supervisor::ResumeFrom resume_point(const RunSnapshot& state, const std::vector<LoggedEvent>& events) {
  supervisor::ResumeFrom from;
  from.supervisor_lost = !is_terminal_state(state.state);
  from.previous_pid = state.supervisor ? state.supervisor->pid : 0;
  from.previous_host = state.supervisor ? state.supervisor->hostname : "";
  from.restarts = state.restarts;
  from.last_seen_wall_ms = state.updated_at_ms.value_or(0);
  std::set<int64_t> committed;
  for (const LoggedEvent& logged : events) {
    std::visit(events::Overloaded{
        [&](const events::PlanGeneration&) { from.last_generation = std::max(from.last_generation, logged.gen.value_or(-1)); },
        [&](const events::GenerationSpawned&) { from.last_generation = std::max(from.last_generation, logged.gen.value_or(-1)); },
        [&](const events::CheckpointCommitted& checkpoint) { committed.insert(checkpoint.step); },
        [&](const events::CheckpointRejected& checkpoint) { committed.erase(checkpoint.step); },
        [](const auto&) {},
    }, logged.event);
  }
  committed.erase(-1);
  from.committed_steps.assign(committed.begin(), committed.end());
  for (const RunSnapshot::Rank& rank : state.ranks) {
    if (rank.step) from.last_step = std::max(from.last_step, *rank.step);
  }
  return from;
}

Status wait_until_old_agents_gone(const RunDirectory& run, const spec::JobSpec& spec, int64_t last_seen_wall_ms) {
  SystemClock clock;
  int64_t timeout = spec.heartbeat.timeout.count();
  int64_t fenced_by = last_seen_wall_ms + timeout + std::min<int64_t>(2000, timeout) + 500;
  auto local = [](const spec::HostEntry& h) { return h.is_local(); };
  bool all_local = std::all_of(spec.hosts.begin(), spec.hosts.end(), local) &&
                   std::all_of(spec.spares.begin(), spec.spares.end(), local);
  if (!all_local && fenced_by > clock.wall_ms()) {
    std::fprintf(stderr, "dtrain: waiting up to %s for the previous supervisor's agents to fence themselves\n",
                 format_duration(Millis((fenced_by - clock.wall_ms() + 99) / 100 * 100)).c_str());
    wait_for_remote_agents(run, run.id(), fenced_by);
  }
  std::vector<int> agents = local_agent_pids(run, spec);
  int64_t give_up = clock.monotonic_ms() + std::max<int64_t>(0, fenced_by - clock.wall_ms()) + 10'000;
  auto alive = [&] {
    return std::any_of(agents.begin(), agents.end(), [](int pid) { return is_agent_process(pid); });
  };
  while (alive() && clock.monotonic_ms() < give_up) ::usleep(50'000);
  for (int pid : agents) {
    if (is_agent_process(pid)) {
      return Error::infra("agent pid " + std::to_string(pid) + " of the previous supervisor still runs 10s after it "
                          "should have fenced; end it (kill " + std::to_string(pid) + ") and resume again");
    }
  }
  return {};
}

}  // namespace dtrain::run
