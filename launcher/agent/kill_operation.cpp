#include "launcher/agent/kill_operation.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <optional>

#include "launcher/agent/process_tree.h"
#include "launcher/agent/worker_process.h"
#include "worker/contract/env.h"

namespace dtrain::agent {
namespace {

// How often a pending kill rescans /proc: short enough that `released` follows the last death
// closely, long enough to cost nothing measurable.
constexpr int64_t kRescanMs = 25;

}  // namespace

KillOperation::KillOperation(int gen, int signal, int grace_ms, int64_t now_ms, std::set<int> ranks,
                             std::map<int, int> moved_generations)
    : gen_(gen),
      ranks_(std::move(ranks)),
      moved_generations_(std::move(moved_generations)),
      signal_(signal),
      started_ms_(now_ms),
      escalate_at_ms_(now_ms + std::max(grace_ms, 0)) {
  if (signal_ == SIGKILL) {
    escalated_ = true;
    give_up_at_ms_ = now_ms + kGiveUpAfterKillMs;
  }
}

bool KillOperation::matches(const Owner& owner) const {
  if (owner.gen && !matches(*owner.gen)) return false;
  if (ranks_.empty()) return true;
  return owner.gen && owner.rank && ranks_.count(*owner.rank) > 0;
}

KillOperation::Owner KillOperation::orphan_owner(pid_t pid) const {
  Owner owner;
  std::optional<std::string> environment = process_environment(pid);
  if (!environment || environment->empty()) {
    owner.environment_unknown = true;
    return owner;
  }
  if (auto value = environment_value(*environment, contract::env::kGeneration)) {
    int generation = std::atoi(value->c_str());
    // Carried over by gen_changed, possibly more than once (moves only go forward: no cycle).
    for (auto moved = moved_generations_.find(generation); moved != moved_generations_.end();
         moved = moved_generations_.find(generation)) {
      generation = moved->second;
    }
    owner.gen = generation;
  }
  if (auto value = environment_value(*environment, contract::env::kRank)) owner.rank = std::atoi(value->c_str());
  return owner;
}

std::vector<pid_t> KillOperation::targets(
    const std::map<pid_t, std::unique_ptr<WorkerProcess>>& workers, bool& undecided) const {
  undecided = false;
  pid_t agent_pid = ::getpid();
  std::vector<ProcessEntry> tree = descendants_of(agent_pid, scan_processes());
  // Parents come before children, so each process inherits its parent's owner unless it is
  // itself a worker; children of the agent that are not workers are orphans.
  std::map<pid_t, Owner> owner_of;
  std::vector<pid_t> found;
  for (const ProcessEntry& entry : tree) {
    Owner owner;
    if (auto worker = workers.find(entry.pid); worker != workers.end()) {
      owner = {worker->second->gen(), worker->second->rank()};
    } else if (entry.parent != agent_pid && owner_of.count(entry.parent)) {
      owner = owner_of[entry.parent];
    } else {
      owner = orphan_owner(entry.pid);
    }
    owner_of[entry.pid] = owner;
    if (!matches(owner)) {
      if (owner.environment_unknown && !ranks_.empty() && entry.state != 'Z') undecided = true;
      continue;
    }
    // A zombie below a live descendant is dead already and its parent's business; one that is
    // the agent's own child still counts until the agent reaps it, so that `released` means
    // reaped.
    if (entry.state == 'Z' && entry.parent != agent_pid) continue;
    found.push_back(entry.pid);
  }
  return found;
}

bool KillOperation::advance(int64_t now_ms,
                            const std::map<pid_t, std::unique_ptr<WorkerProcess>>& workers) {
  if (!escalated_ && now_ms >= escalate_at_ms_) {
    escalated_ = true;
    signal_ = SIGKILL;
    signalled_now_.clear();
    give_up_at_ms_ = now_ms + kGiveUpAfterKillMs;
  }
  // Whole worker groups first: that also reaches a child forked after the /proc scan.
  bool workers_left = false;
  for (const auto& [pid, worker] : workers) {
    if (!covers(worker->gen(), worker->rank())) continue;
    workers_left = true;
    if (signalled_now_.insert(-pid).second) {
      // Only groups whose leader is unreaped: the agent drops a worker from `workers` when it
      // reaps it. The handle makes sure of it all the same (a pidfd names this process only).
      (void)send_signal(worker->handle(), signal_, SignalScope::group);
      continue_after_term(worker->handle(), SignalScope::group);
      worker->signalled_by_agent = true;
      killed_.insert(pid);
    }
  }
  bool undecided = false;
  std::vector<pid_t> alive = targets(workers, undecided);
  for (pid_t pid : alive) {
    if (!signalled_now_.insert(pid).second || process_state(pid) == 'Z') continue;
    // A member of a worker group signalled above got this signal already. A second TERM would
    // land in the middle of its TERM handler's cleanup (Python restores the default disposition
    // while exiting and dies by it): once is what a graceful worker is promised.
    pid_t group = ::getpgid(pid);
    if (group > 0 && signalled_now_.count(-group)) {
      killed_.insert(pid);
      continue;
    }
    // Not our child (an orphan or a grandchild): taken by pid now, refused if it is gone.
    Result<ProcessHandle> target = ProcessHandle::for_process(pid);
    if (target && send_signal(*target, signal_).ok()) {
      continue_after_term(*target, SignalScope::process);
      killed_.insert(pid);
    }
  }
  if (alive.empty() && !workers_left && !(undecided && now_ms < started_ms_ + kEnvironmentSettleMs)) return true;
  if (escalated_ && now_ms >= give_up_at_ms_) {
    remaining_ = alive;
    for (const auto& [pid, worker] : workers) {
      if (covers(worker->gen(), worker->rank()) && std::find(alive.begin(), alive.end(), pid) == alive.end()) {
        remaining_.push_back(pid);
      }
    }
    return true;
  }
  return false;
}

void KillOperation::continue_after_term(const ProcessHandle& target, SignalScope scope) const {
  // A stopped process (SIGSTOP, a hung-worker drill, ^Z) keeps TERM pending and does nothing
  // until it runs again, so without CONT every kill of a stopped worker would wait the whole
  // grace period and end in KILL, never letting it clean up. CONT after TERM (not before) so
  // that TERM is already pending when it runs. Harmless to a running process; KILL needs none.
  if (signal_ == SIGTERM) (void)send_signal(target, SIGCONT, scope);
}

int64_t KillOperation::next_check_ms(int64_t now_ms) const {
  int64_t next = now_ms + kRescanMs;
  if (!escalated_) next = std::min(next, escalate_at_ms_);
  return next;
}

proto::Released KillOperation::released_message(int64_t now_ms) const {
  proto::Released message;
  message.gen = gen_;
  message.killed.assign(killed_.begin(), killed_.end());
  message.remaining = static_cast<int64_t>(remaining_.size());
  message.ms = now_ms - started_ms_;
  if (!ranks_.empty()) message.ranks = std::vector<int64_t>(ranks_.begin(), ranks_.end());
  message.remaining_pids.assign(remaining_.begin(), remaining_.end());
  return message;
}

}  // namespace dtrain::agent
