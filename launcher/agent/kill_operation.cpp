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

KillOperation::KillOperation(int gen, int signal, int grace_ms, int64_t now_ms)
    : gen_(gen),
      signal_(signal),
      started_ms_(now_ms),
      escalate_at_ms_(now_ms + std::max(grace_ms, 0)) {
  if (signal_ == SIGKILL) {
    escalated_ = true;
    give_up_at_ms_ = now_ms + kGiveUpAfterKillMs;
  }
}

std::vector<pid_t> KillOperation::targets(
    const std::map<pid_t, std::unique_ptr<WorkerProcess>>& workers) const {
  pid_t agent_pid = ::getpid();
  std::vector<ProcessEntry> tree = descendants_of(agent_pid, scan_processes());
  // Parents come before children, so each process inherits its parent's generation unless it
  // is itself a worker; children of the agent that are not workers are orphans.
  std::map<pid_t, std::optional<int>> generation_of;
  std::vector<pid_t> found;
  for (const ProcessEntry& entry : tree) {
    std::optional<int> generation;
    if (auto worker = workers.find(entry.pid); worker != workers.end()) {
      generation = worker->second->gen();
    } else if (entry.parent != agent_pid && generation_of.count(entry.parent)) {
      generation = generation_of[entry.parent];
    } else if (auto value = process_environment_value(entry.pid, contract::env::kGeneration)) {
      generation = std::atoi(value->c_str());
    }
    generation_of[entry.pid] = generation;
    if (generation && !matches(*generation)) continue;
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
    if (!matches(worker->gen())) continue;
    workers_left = true;
    if (signalled_now_.insert(-pid).second) {
      ::kill(-pid, signal_);  // safe: the leader is unreaped, so its pid cannot be reused
      continue_after_term(-pid);
      if (!worker->signalled_by_agent) ++killed_workers_;
      worker->signalled_by_agent = true;
      killed_.insert(pid);
    }
  }
  std::vector<pid_t> alive = targets(workers);
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
    if (::kill(pid, signal_) == 0) {
      continue_after_term(pid);
      killed_.insert(pid);
    }
  }
  if (alive.empty() && !workers_left) return true;
  if (escalated_ && now_ms >= give_up_at_ms_) {
    remaining_ = alive;
    for (const auto& [pid, worker] : workers) {
      if (matches(worker->gen()) && std::find(alive.begin(), alive.end(), pid) == alive.end()) {
        remaining_.push_back(pid);
      }
    }
    return true;
  }
  return false;
}

void KillOperation::continue_after_term(pid_t target) const {
  // A stopped process (SIGSTOP, a hung-worker drill, ^Z) keeps TERM pending and does nothing
  // until it runs again, so without CONT every kill of a stopped worker would wait the whole
  // grace period and end in KILL, never letting it clean up. CONT after TERM (not before) so
  // that TERM is already pending when it runs. Harmless to a running process; KILL needs none.
  if (signal_ == SIGTERM) ::kill(target, SIGCONT);
}

int64_t KillOperation::next_check_ms(int64_t now_ms) const {
  int64_t next = now_ms + kRescanMs;
  if (!escalated_) next = std::min(next, escalate_at_ms_);
  return next;
}

nlohmann::json KillOperation::released_message(int64_t now_ms) const {
  nlohmann::json killed = nlohmann::json::array();
  for (pid_t pid : killed_) killed.push_back(pid);
  nlohmann::json message = {{"type", "released"},
                            {"gen", gen_},
                            {"killed", std::move(killed)},
                            {"remaining", remaining_.size()},
                            {"ms", now_ms - started_ms_}};
  if (!remaining_.empty()) message["remaining_pids"] = remaining_;
  return message;
}

}  // namespace dtrain::agent
