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
//
// A kill with ranks (before an in-place recovery) is surgical: only the worker groups of those
// ranks of the generation, the descendants whose nearest live worker ancestor is one of them,
// and orphans whose environment names the generation and one of those ranks (RANK). An orphan
// that says less is left to a kill of the whole generation: it may belong to a survivor. One
// whose environment cannot be read yet (for a moment after its exec it reads empty) is looked at
// again for up to kEnvironmentSettleMs before it is taken to say nothing.

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <vector>

#include "launcher/proto/agent_messages.h"

#include "launcher/base/process_signal.h"

namespace dtrain::agent {

class WorkerProcess;

class KillOperation {
 public:
  /// `gen` -1 means every generation. `signal` is SIGTERM or SIGKILL. `ranks`: only those
  /// workers of `gen` (empty: all of them). `moved_generations`: the agent's gen_changed so far
  /// (from → to), so that an orphan whose DTRAIN_GENERATION names a generation that was carried
  /// over counts as a member of the one it was carried to.
  KillOperation(int gen, int signal, int grace_ms, int64_t now_ms, std::set<int> ranks = {},
                std::map<int, int> moved_generations = {});

  /// Signals what has not been signalled yet, escalates to KILL once the grace is over, and
  /// returns true when nothing of the generation remains: no matching descendant is alive and
  /// no matching worker is still unreaped (so its exit has been reported first). Gives up 10 s
  /// after KILL (processes stuck in the kernel) and reports what remains.
  bool advance(int64_t now_ms, const std::map<pid_t, std::unique_ptr<WorkerProcess>>& workers);

  /// When advance() should run next at the latest.
  int64_t next_check_ms(int64_t now_ms) const;

  int gen() const { return gen_; }

  /// Whether this kill is meant to end rank `rank` of generation `gen` (gen_changed does not
  /// carry over a worker that is being killed).
  bool covers(int gen, int rank) const { return matches(gen) && (ranks_.empty() || ranks_.count(rank) > 0); }

  /// The `released` message, valid once advance() returned true.
  proto::Released released_message(int64_t now_ms) const;

  /// Distinct processes signalled.
  size_t killed_count() const { return killed_.size(); }

  /// How long after KILL a kill gives up waiting (D-state processes cannot be killed).
  static constexpr int64_t kGiveUpAfterKillMs = 10'000;

  /// How long a kill with ranks waits for an orphan's unreadable environment to say whose it is.
  static constexpr int64_t kEnvironmentSettleMs = 2'000;

 private:
  /// The live processes this kill must end. `undecided`: set when some process's owner cannot
  /// be told yet (a kill with ranks, an environment not readable yet).
  std::vector<pid_t> targets(const std::map<pid_t, std::unique_ptr<WorkerProcess>>& workers, bool& undecided) const;
  bool matches(int generation) const { return gen_ < 0 || generation == gen_; }
  /// Whose a process is: the worker it descends from, or what an orphan's environment says.
  struct Owner {
    std::optional<int> gen;
    std::optional<int> rank;
    bool environment_unknown = false;  ///< an orphan whose environment could not be read (yet)
  };
  bool matches(const Owner& owner) const;
  Owner orphan_owner(pid_t pid) const;
  /// SIGCONT to `target` (or the group it leads) after a TERM, so that a stopped process acts on it.
  void continue_after_term(const ProcessHandle& target, SignalScope scope) const;

  int gen_;
  std::set<int> ranks_;
  std::map<int, int> moved_generations_;
  int signal_;
  int64_t started_ms_;
  int64_t escalate_at_ms_;
  int64_t give_up_at_ms_ = 0;
  bool escalated_ = false;
  std::set<pid_t> signalled_now_;  // with the current signal
  std::set<pid_t> killed_;
  std::vector<pid_t> remaining_;
};

}  // namespace dtrain::agent
