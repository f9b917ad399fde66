// The supervisor's in-place recovery (elastic.in_place): starting it once decide_recovery chose
// it, the cells of its three phases (in_place_killing, in_place_launching, in_place_running),
// the deadline and the fallback to a full restart, and its phases in recovery.completed.
#include "launcher/supervisor/supervisor.h"

#include "launcher/base/duration.h"
#include "launcher/events/events.h"

#include <algorithm>

namespace dtrain::supervisor {

bool Supervisor::replacing() const {
  return phase_ == Phase::in_place_killing || phase_ == Phase::in_place_launching || phase_ == Phase::in_place_running;
}

void Supervisor::start_in_place(const RootCause& cause, bool host_lost, RecoveryDecision& decision, int64_t now) {
  in_place_ = InPlace{};
  in_place_.from_gen = gen_.number;
  in_place_.replaced = decision.replaced_ranks;
  in_place_.decided_ms = now;
  in_place_.deadline_ms = now + spec_.in_place_timeout().count();
  std::set<std::string> current;
  for (const plan::PlanHost& host : plan_.hosts) current.insert(host.entry.name);
  if (host_lost && decision.next_plan) {  // a lost host's spare, in its place
    std::vector<std::string> without(excluded_.begin(), excluded_.end());
    record(events::PlanChanged{plan::diff_text(plan_, *decision.next_plan), without}.to_json());
    plan_ = std::move(*decision.next_plan);
  }
  // The health gate, as before any re-rendezvous: the spare taken in and the blamed host that
  // stays check themselves before a replacement starts there (while a hung rank is killed).
  in_place_.awaiting_health = ask_health_of(current, plan_);
  std::string checking;
  for (const std::string& host : in_place_.awaiting_health) checking += (checking.empty() ? "" : ", ") + host;
  if (host_lost || cause.kind == FailureKind::worker_exit) {
    if (in_place_.awaiting_health.empty()) {
      continue_in_place();
      return;
    }
    set_phase(Phase::in_place_killing, "in-place recovery: health check of " + checking + " before a replacement starts");
    return;
  }
  // A hung or misbehaving rank still runs: only it is killed; its exit carries on (exit_while_killing).
  in_place_.rank = cause.rank;
  set_phase(Phase::in_place_killing, "in-place recovery: killing rank " + std::to_string(cause.rank) + " (" +
                                         decision.why + ")" +
                                         (checking.empty() ? "" : "; health check of " + checking));
  out_.push_back(KillRanks{gen_.number, cause.host, {cause.rank}});
}

void Supervisor::continue_in_place_when_ready() {
  if (phase_ != Phase::in_place_killing || !in_place_.awaiting_health.empty()) return;
  if (in_place_.rank >= 0 && !in_place_.killed) return;
  continue_in_place();
}

void Supervisor::continue_in_place() {
  int64_t now = clock_.monotonic_ms();
  in_place_.continued_ms = now;
  if (recovery_ && recovery_->health_asked_ms > 0 && recovery_->health_ms == 0) {
    recovery_->health_ms = std::max<int64_t>(1, now - recovery_->health_asked_ms);
  }
  // Every rank but the replaced ones is a survivor, running in the new generation from now on
  // (the agents carry it over).
  std::map<int, int> survivors;
  for (size_t i = 0; i < plan_.ranks.size(); ++i) {
    const int rank = static_cast<int>(i);
    if (std::find(in_place_.replaced.begin(), in_place_.replaced.end(), rank) != in_place_.replaced.end()) continue;
    survivors[rank] = i < gen_.ranks.size() ? gen_.ranks[i].pid : 0;
  }
  gen_ = make_generation(gen_.number + 1, plan_.ranks.size(), now, newest_step(), latest_checkpoint_step_, spec_,
                         survivors);
  watch_generation();
  std::string replaced;
  for (int rank : in_place_.replaced) replaced += (replaced.empty() ? "" : ",") + std::to_string(rank);
  set_phase(Phase::in_place_launching, "in-place recovery: rank(s) " + replaced +
                                           " replaced; the other workers are carried over to generation " +
                                           std::to_string(gen_.number));
  std::vector<std::string> hosts;
  for (const plan::PlanHost& host : plan_.hosts) hosts.push_back(host.entry.name);
  record(events::PlanGeneration{gen_.number, plan_.world_size, plan_.data, plan_.tensor, plan_.pipeline,
                                plan_.grad_accum, -1, hosts}
             .to_json());
  update_hang_timeouts();
  std::vector<std::string> live = live_hosts();
  in_place_.awaiting_carry = std::set<std::string>(live.begin(), live.end());
  if (recovery_) {
    recovery_->resume_step = -1;
    recovery_->stop_sent_ms = in_place_.decided_ms;
    recovery_->released_ms = now;
    recovery_->spawned_ms = now;
  }
  out_.push_back(ContinueInPlace{in_place_.from_gen, gen_.number, plan_, in_place_.replaced, live, restarts_});
}

void Supervisor::fall_back_from_in_place(const std::string& why) {
  record(events::RecoveryFallback{gen_.number, why}.to_json());
  if (recovery_) {
    recovery_->fallback = why;
    recovery_->action = to_string(RecoveryAction::restart);
    // The restart measures its own start: what the attempt reached is not the restart's.
    recovery_->started_ms = 0;
    recovery_->comm_ready_ms = 0;
  }
  stop_to_recover("the in-place recovery could not finish: " + why + "; restarting every worker");
}

bool Supervisor::in_place_past_deadline() {
  if (clock_.monotonic_ms() <= in_place_.deadline_ms) return false;
  if (phase_ == Phase::in_place_killing && !in_place_.awaiting_health.empty() &&
      (in_place_.rank < 0 || in_place_.killed)) {
    std::string hosts;
    for (const std::string& host : in_place_.awaiting_health) hosts += (hosts.empty() ? "" : ", ") + host;
    fall_back_from_in_place("not finished within " + format_duration(spec_.in_place_timeout()) +
                            " (elastic.in_place_timeout); no health answer from " + hosts);
    return true;
  }
  fall_back_from_in_place(in_place_timeout_reason(phase_ == Phase::in_place_killing, gen_.ranks, spec_));
  return true;
}

// ---- the cells of the in-place phases ---------------------------------------------------------

void Supervisor::exit_while_killing(const WorkerExited& event) {
  RankStatus* rank = rank_of(event.gen, event.rank);
  if (!rank) return;
  if (event.rank != in_place_.rank) {  // another rank: a consequence, as during any stop
    exit_while_stopping(event);
    return;
  }
  rank->state = RankState::killed;
  in_place_.killed_ms = clock_.monotonic_ms();
  in_place_.killed = true;
  continue_in_place_when_ready();
}

void Supervisor::replacement_started(const WorkerStarted& event) { start_rank_then(event, Phase::in_place_running); }

void Supervisor::survivors_carried_over(const SurvivorsCarriedOver& event) {
  if (event.gen != gen_.number) return;
  record(events::RecoveryCarriedOver{event.gen, event.host, event.ranks, event.pids}.to_json());
  for (size_t k = 0; k < event.ranks.size() && k < event.pids.size(); ++k) {
    if (RankStatus* rank = rank_of(event.gen, event.ranks[k])) rank->pid = static_cast<int>(event.pids[k]);
  }
  if (auto shortfall = carry_over_shortfall(plan_, in_place_.replaced, event.host, event.ranks, event.gen)) {
    fall_back_from_in_place(*shortfall);
    return;
  }
  in_place_.awaiting_carry.erase(event.host);
  if (in_place_.awaiting_carry.empty()) in_place_.carried_ms = clock_.monotonic_ms();
}

void Supervisor::progress_in_place(const WorkerProgress& event) {
  if (!note_progress(event) || !recovery_ || !recovery_->started_ms || event.step <= recovery_->resume_step) return;
  // A survivor's first beats of the new generation may still be its old step (a line in flight
  // when its agent carried it over): only a beat after every communicator is up again is a step
  // of the new generation.
  if (!recovery_->comm_ready_ms) return;
  complete_recovery(event.step, true);
  set_phase(Phase::running, "in-place recovery completed");
}

void Supervisor::check_in_place(const Tick&) {
  if (!in_place_past_deadline()) check_health_deadlines(clock_.monotonic_ms());
}

void Supervisor::check_in_place_launch(const Tick&) {
  if (!in_place_past_deadline()) check_launch_deadline(clock_.monotonic_ms());
}

void Supervisor::check_in_place_hangs(const Tick& tick) {
  if (!in_place_past_deadline()) watch_hangs(tick);
}

void Supervisor::add_in_place_phases(nlohmann::json& phases, int64_t now) const {
  // decision → (a hung rank killed) → every host carried its survivors over ("abort": they are
  // told to abandon the step) and the replacement started → every communicator up again → the
  // first step, which begins with the state transfer from a live replica.
  const PendingRecovery& r = *recovery_;
  if (in_place_.killed_ms) phases["kill_ms"] = in_place_.killed_ms - in_place_.decided_ms;
  // decision → every health answer in (the hung rank's kill runs meanwhile) → continued.
  if (r.health_ms > 0) phases["health_ms"] = r.health_ms;
  int64_t continued_ms = in_place_.continued_ms;
  if (in_place_.carried_ms) phases["abort_ms"] = in_place_.carried_ms - continued_ms;
  phases["spawn_ms"] = r.started_ms - r.spawned_ms;
  int64_t all_there = std::max({r.started_ms, in_place_.carried_ms, continued_ms});
  phases["rendezvous_ms"] = std::max<int64_t>(0, r.comm_ready_ms - all_there);
  phases["state_and_first_step_ms"] = now - r.comm_ready_ms;
}

}  // namespace dtrain::supervisor
