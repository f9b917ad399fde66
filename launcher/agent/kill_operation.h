#pragma once
// One `kill` (or the fence) in progress: TERM (or KILL) to every process of a generation, KILL
// to whatever is left after the grace period, done when nothing of it is left. Every TERM is
// followed by CONT: a stopped process (a hung worker SIGSTOPped) would otherwise hold TERM
// pending until KILL. Progress is made
// by advance() from the agent's loop, so the loop never blocks while processes die.
//
// "Every process of a generation" is found in /proc, not assumed: the worker process groups,
// plus every descendant of the agent whose nearest live worker ancestor belongs to that
// generation. Orphans (reparented to the agent, which is a child subreaper) are attributed by
// DTRAIN_GENERATION in their environment; an orphan with none matches every kill, since no live
// worker can need it.

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <set>
#include <vector>

#include <nlohmann/json.hpp>

namespace dtrain::agent {

class WorkerProcess;

class KillOperation {
 public:
  /// `gen` -1 means every generation. `signal` is SIGTERM or SIGKILL.
  KillOperation(int gen, int signal, int grace_ms, int64_t now_ms);

  /// Signals what has not been signalled yet, escalates to KILL once the grace is over, and
  /// returns true when nothing of the generation remains: no matching descendant is alive and
  /// no matching worker is still unreaped (so its exit has been reported first). Gives up 10 s
  /// after KILL (processes stuck in the kernel) and reports what remains.
  bool advance(int64_t now_ms, const std::map<pid_t, std::unique_ptr<WorkerProcess>>& workers);

  /// When advance() should run next at the latest.
  int64_t next_check_ms(int64_t now_ms) const;

  int gen() const { return gen_; }

  /// The `released` message, valid once advance() returned true.
  nlohmann::json released_message(int64_t now_ms) const;

  /// Distinct processes signalled, and how many of them were workers.
  size_t killed_count() const { return killed_.size(); }
  size_t killed_worker_count() const { return killed_workers_; }

  /// How long after KILL a kill gives up waiting (D-state processes cannot be killed).
  static constexpr int64_t kGiveUpAfterKillMs = 10'000;

 private:
  std::vector<pid_t> targets(const std::map<pid_t, std::unique_ptr<WorkerProcess>>& workers) const;
  bool matches(int generation) const { return gen_ < 0 || generation == gen_; }
  /// SIGCONT to `target` (a pid, or -pgid) after a TERM, so that a stopped process acts on it.
  void continue_after_term(pid_t target) const;

  int gen_;
  int signal_;
  int64_t started_ms_;
  int64_t escalate_at_ms_;
  int64_t give_up_at_ms_ = 0;
  bool escalated_ = false;
  std::set<pid_t> signalled_now_;  // with the current signal
  std::set<pid_t> killed_;
  size_t killed_workers_ = 0;
  std::vector<pid_t> remaining_;
};

}  // namespace dtrain::agent
