// kill-host and partition-host (see host_drill.h).

#include "launcher/drill/host_drill.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <thread>

#include "launcher/base/clock.h"
#include "launcher/base/strings.h"
#include "launcher/base/child_process.h"
#include "launcher/drill/partition.h"
#include "launcher/hosts/run_hosts.h"
#include "launcher/drill/run_processes.h"
#include "launcher/events/events.h"

namespace dtrain::drill {

using hosts::RunHosts;

using nlohmann::json;

namespace {

constexpr Millis kCommandTimeout{60'000};
constexpr Millis kGoneGrace{3000};
/// The firewall helper waits this long before cutting, so the SSH session that started it
/// can end cleanly first.
constexpr Millis kFirewallStartDelay{500};
/// How long past the partition duration the host may take to answer again without its rules.
constexpr Millis kFirewallHealBound{30'000};

std::string pids_text(const std::vector<int>& pids) {
  std::string text;
  for (int pid : pids) text += (text.empty() ? "" : " ") + std::to_string(pid);
  return text;
}

/// Every worker pid the run ever started on `host`: whatever generation it belonged to, none
/// may be left there.
std::vector<int> worker_pids_on(const LiveRun& run, const std::string& host) {
  std::vector<int> pids;
  for (const LoggedEvent& event : run.events()) {
    const auto* started = std::get_if<events::WorkerStarted>(&event.event);
    if (started && started->host == host && started->pid > 1) pids.push_back(started->pid);
  }
  return pids;
}

/// Polls until none of `pids` runs on `host` any more, or `within` passes; a host that cannot
/// be reached yet (just healed) is asked again. The check's verdict and detail.
CheckResult check_host_clean(const RunHosts& hosts, const std::string& host, const std::vector<int>& pids,
                             const std::string& run_id, Millis within) {
  auto give_up = std::chrono::steady_clock::now() + within;
  std::string how = hosts.is_local(host) ? "checked here" : "checked over SSH";
  std::string last_error;
  std::vector<int> left;
  for (;;) {
    Result<std::vector<int>> running = hosts.still_running(host, pids, run_id);
    if (running) {
      last_error.clear();
      left = *running;
      if (left.empty()) {
        return {"nothing left on " + host, true,
                std::to_string(pids.size()) + " process(es) of the run (agent and workers: " + pids_text(pids) +
                    ") gone, " + how};
      }
    } else {
      last_error = running.error().message;
    }
    if (std::chrono::steady_clock::now() >= give_up) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
  }
  if (!last_error.empty()) return {"nothing left on " + host, false, "could not check: " + last_error};
  return {"nothing left on " + host, false, "still running there: pid " + pids_text(left) + " (" + how + ")"};
}

/// The other hosts' processes of the hit generation: local ones from /proc here, remote ones
/// over SSH. Returns those still alive.
std::vector<int> survivors_elsewhere(const RunHosts& hosts, const GenerationView& view, const std::string& skip,
                                     const std::string& run_id) {
  std::vector<int> alive;
  for (const auto& [host, pids] : view.pids_by_host) {
    if (host == skip) continue;
    if (hosts.is_local(host)) {
      for (int pid : wait_until_gone(pids, kGoneGrace)) alive.push_back(pid);
      continue;
    }
    Result<std::vector<int>> running = hosts.still_running(host, pids, run_id);
    if (running) alive.insert(alive.end(), running->begin(), running->end());
  }
  return alive;
}

std::string table_name(const std::string& run_id) {
  std::string name = "dtrain_drill_";
  for (char c : run_id) name += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  return name.substr(0, 60);
}

struct Cut {
  int64_t wall_ms = 0;
  std::string method;  ///< "commands" or "firewall"
  std::string detail;  ///< the command run, or the firewall helper's answer
  /// firewall: when the rules went in, on the host's clock (read back once it has healed)
  std::optional<int64_t> stamped_ms;
};

/// How far the host's stamp of the cut may lie from the drill's estimate before it is taken
/// for a clock that is off rather than a truer time.
constexpr int64_t kStampTrustMs = 5000;

Result<Cut> cut_off(const RunHosts& hosts, const Fault& fault, const std::string& table, Millis duration) {
  const std::string& host = fault.target;
  Cut cut;
  if (fault.partition == PartitionMethod::firewall) {
    if (hosts.is_local(host)) {
      return Error::user("partition-host:" + host + ": " + host + " is the launch node itself; the firewall method "
                         "cuts a remote host off from the launch node. Use --cut-command/--heal-command instead");
    }
    Result<CommandOutput> ran = hosts.shell(host, firewall_cut_script(table, kFirewallStartDelay, duration),
                                            Millis(30'000));
    if (!ran) return ran.error();
    if (ran->exit_code != 0) {
      return Error::infra("partition-host:" + host + ": the firewall cut did not start (exit " +
                          std::to_string(ran->exit_code) + "): " + std::string(trim(ran->err)));
    }
    cut.wall_ms = SystemClock().wall_ms() + kFirewallStartDelay.count();
    cut.method = "firewall";
    cut.detail = std::string(trim(ran->out)) + " for " + format_duration(duration);
    return cut;
  }
  std::string command = expand_host_command(fault.cut_command, host);
  Result<CommandOutput> ran = run_command({"/bin/sh", "-c", command}, kCommandTimeout);
  // The cut is in effect once the command has returned (a switch port set down, a rule in).
  cut.wall_ms = SystemClock().wall_ms();
  if (!ran) return Error::infra("partition-host:" + host + ": the cut command `" + command + "`: " + ran.error().message);
  if (ran->exit_code != 0) {
    return Error::infra("partition-host:" + host + ": the cut command `" + command + "` failed (exit " +
                        std::to_string(ran->exit_code) + "): " + std::string(trim(ran->err + ran->out)));
  }
  cut.method = "commands";
  cut.detail = command;
  return cut;
}

/// The firewall heals itself: wait until its rules should have expired, then prove it. Reaching
/// the host over SSH at all proves the launch node is no longer cut off; the check script
/// proves no rule of the drill is left. A helper a little late (a loaded host) is asked again.
CheckResult await_firewall_heal(const RunHosts& hosts, const Fault& fault, Cut& cut, const std::string& table,
                                Millis duration, const Say& say) {
  int64_t wait = cut.wall_ms + duration.count() - SystemClock().wall_ms();
  if (wait > 0) {
    if (say) say("waiting " + format_duration(Millis(wait)) + " for " + fault.target + "'s firewall rules to expire");
    std::this_thread::sleep_for(std::chrono::milliseconds(wait));
  }
  auto give_up = std::chrono::steady_clock::now() + kFirewallHealBound;
  std::string last;
  for (;;) {
    Result<CommandOutput> ran = hosts.shell(fault.target, firewall_check_script(table), Millis(10'000));
    if (ran && ran->exit_code == 0) {
      if (say) say(fault.target + " healed itself: reachable over SSH, no rule of the drill left");
      cut.stamped_ms = parse_cut_at(ran->out);
      return {"healed", true, fault.target + " removed its own rules after " + format_duration(duration) +
                                  " (reachable over SSH again; no table inet " + table + " left)"};
    }
    last = !ran ? "not reachable over SSH: " + ran.error().message
                : std::string(trim(ran->out + ran->err)) + " (exit " + std::to_string(ran->exit_code) + ")";
    if (std::chrono::steady_clock::now() >= give_up || cancel_requested()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
  return {"healed", false, fault.target + " did not heal within " + format_duration(kFirewallHealBound) +
                               " after its " + format_duration(duration) + " cut should have ended: " + last +
                               "; remove the rules on the host by hand (nft delete table inet " + table + ")"};
}

CheckResult heal(const RunHosts& hosts, const Fault& fault, Cut& cut, const std::string& table, Millis duration,
                 const Say& say) {
  if (fault.partition == PartitionMethod::firewall) return await_firewall_heal(hosts, fault, cut, table, duration, say);
  std::string command = expand_host_command(fault.heal_command, fault.target);
  Result<CommandOutput> ran = run_command({"/bin/sh", "-c", command}, kCommandTimeout);
  if (!ran) return {"healed", false, "`" + command + "`: " + ran.error().message};
  if (ran->exit_code != 0) {
    return {"healed", false, "`" + command + "` failed (exit " + std::to_string(ran->exit_code) + "): " +
                                 std::string(trim(ran->err + ran->out))};
  }
  if (say) say("healed " + fault.target + ": " + command);
  return {"healed", true, command};
}

}  // namespace

Result<FaultRecord> inject_host_fault(LiveRun& run, const Fault& fault, const Ready& ready, Deadline deadline,
                                      const Say& say) {
  Result<RunHosts> opened = RunHosts::open(run.directory());
  if (!opened) return opened.error();
  const RunHosts& hosts = *opened;
  const std::string& host = fault.target;
  auto on_host = ready.view.pids_by_host.find(host);
  if (on_host == ready.view.pids_by_host.end()) {
    std::string used;
    for (const auto& [name, pids] : ready.view.pids_by_host) used += (used.empty() ? "" : ", ") + name;
    return Error::infra(fault.label() + ": generation " + std::to_string(ready.view.generation) + " of run " +
                        run.id() + " runs no worker on " + host + " (it runs on " + used +
                        "); drill a host of the current generation");
  }
  std::optional<int> agent = hosts.agent_pid(host);
  if (!agent) {
    return Error::infra(fault.label() + ": no agent pid recorded for " + host + " in " +
                        run.directory().host_facts_path(host));
  }
  FaultRecord record;
  Injection& injection = record.injection;
  injection.fault = fault;
  injection.generation = ready.view.generation;
  for (const auto& [name, pids] : ready.view.pids_by_host) injection.hosts.push_back(name);
  injection.at_step = ready.step;
  injection.pid = *agent;
  const spec::JobSpec& spec = hosts.spec();
  Millis duration = fault.partition_duration.value_or(default_partition_duration(spec.heartbeat.timeout, spec.stop_grace));

  size_t events_before = run.events().size();
  events::DrillInjected injected{to_string(fault.kind), host, *agent, injection.at_step, injection.generation};
  injected.workers = on_host->second;
  std::optional<Cut> cut;
  if (fault.kind == FaultKind::kill_host) {
    Result<int64_t> killed = hosts.kill_all(host, *agent, on_host->second);
    if (!killed) return killed.error();
    injection.wall_ms = *killed;
    injected.method = hosts.is_local(host) ? "signal" : "ssh";
  } else {
    Result<Cut> done = cut_off(hosts, fault, table_name(run.id()), duration);
    if (!done) return done.error();
    cut = *done;
    injection.wall_ms = cut->wall_ms;
    injected.method = cut->method;
    injected.detail = cut->detail;
    injected.duration_ms = duration.count();
  }
  if (Status appended = run.append(injected.to_json()); !appended && say) say("warning: " + appended.error().message);
  if (say) {
    say("injected " + fault.label() + " (agent pid " + std::to_string(*agent) + ", " +
        std::to_string(on_host->second.size()) + " worker(s), step " + std::to_string(injection.at_step) +
        ", generation " + std::to_string(injection.generation) + (cut ? ", " + cut->detail : std::string()) + ")");
  }

  // A cut host is healed at the latest when its partition time is up, recovered or not.
  Deadline follow_until = deadline;
  if (cut) {
    int64_t left = std::max<int64_t>(0, injection.wall_ms + duration.count() - SystemClock().wall_ms());
    follow_until = std::min(deadline, std::chrono::steady_clock::now() + std::chrono::milliseconds(left));
  }
  FollowResult followed = follow_recovery(run, events_before, follow_until, false, nullptr);
  record.recovered = followed.recovered;
  record.run_ended = followed.run_ended;
  if (say) {
    say(record.recovered ? "recovered" : record.run_ended ? "the run ended before it recovered" : "no recovery in time");
  }
  if (cut) {
    record.checks.push_back(heal(hosts, fault, *cut, table_name(run.id()), duration, say));
    // The firewall helper's own stamp is when the host really went dark; the drill only knew
    // when it asked for the cut (plus the helper's start delay).
    if (cut->stamped_ms && std::abs(*cut->stamped_ms - injection.wall_ms) <= kStampTrustMs) {
      if (say) {
        say("the rules went in " + std::to_string(*cut->stamped_ms - injection.wall_ms) +
            "ms from the drill's estimate (host clock); measuring from then");
      }
      injection.wall_ms = *cut->stamped_ms;
    }
  }

  // The cut-off agent fences itself after heartbeat.timeout and stop_grace; a killed host's
  // processes are gone at once. Either way, nothing of the run may remain on the host.
  std::vector<int> on_target = worker_pids_on(run, host);
  on_target.push_back(*agent);
  Millis within = spec.heartbeat.timeout + spec.stop_grace + Millis(15'000);
  record.checks.push_back(check_host_clean(hosts, host, on_target, run.id(), within));
  record.surviving_pids = survivors_elsewhere(hosts, ready.view, host, run.id());

  if (Status polled = run.poll(); !polled && say) say("warning: " + polled.error().message);
  record.state_after = recorded_state(run.state());
  record.events_after.assign(run.events().begin() + static_cast<std::ptrdiff_t>(events_before), run.events().end());
  return record;
}

}  // namespace dtrain::drill
