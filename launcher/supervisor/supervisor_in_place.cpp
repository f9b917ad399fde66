// The supervisor's in-place recovery (elastic.in_place): starting it once decide_recovery chose
// it, carrying the survivors over to the next generation, the deadline and the fallback to a full
// restart, and its phases in recovery.completed. The rest of the state machine is supervisor.cpp.
#include "launcher/supervisor/supervisor.h"

#include "launcher/supervisor/recovery_decision.h"

#include "launcher/base/duration.h"
#include "launcher/events/events.h"

#include <algorithm>

namespace dtrain::supervisor {

Millis Supervisor::in_place_timeout() const { return spec_.in_place_timeout(); }

void Supervisor::start_in_place(const RootCause& cause, bool host_lost, RecoveryDecision& decision, int64_t now) {
  InPlace in_place;
  in_place.from_gen = generation_;
  in_place.replaced = decision.replaced_ranks;
  in_place.decided_ms = now;
  in_place.deadline_ms = now + in_place_timeout().count();
  in_place_ = in_place;
  if (host_lost && decision.next_plan) {  // a lost host's spare, in its place
    std::vector<std::string> without(excluded_.begin(), excluded_.end());
    record(events::PlanChanged{plan::diff_text(plan_, *decision.next_plan), without}.to_json());
    plan_ = std::move(*decision.next_plan);
  }
  if (host_lost || cause.kind == "worker.exit") {
    continue_in_place();
    return;
  }
  in_place_->rank = cause.rank;
  // A hung or misbehaving rank still runs: only it is killed; its exit carries on (on WorkerExited).
  in_place_->awaiting_exit = true;
  set_state(RunState::recovering, "in-place recovery: killing rank " + std::to_string(cause.rank) + " (" +
                                      decision.why + ")");
  out_.push_back(KillRanks{generation_, cause.host, {cause.rank}});
}

void Supervisor::continue_in_place() {
  InPlace& in_place = *in_place_;
  int64_t now = clock_.monotonic_ms();
  int64_t previous_newest = newest_step();
  std::vector<RankStatus> previous = std::move(ranks_);
  ++generation_;
  ranks_.assign(plan_.ranks.size(), RankStatus{});
  started_count_ = 0;
  for (size_t i = 0; i < ranks_.size(); ++i) {
    if (std::find(in_place.replaced.begin(), in_place.replaced.end(), static_cast<int>(i)) != in_place.replaced.end()) {
      ranks_[i].state = RankState::starting;
      continue;
    }
    // A survivor is running in the new generation from now on (the agents carry it over); its
    // step is unknown until it beats again after the rejoin, so it is not watched for hangs
    // before that.
    ranks_[i].state = RankState::running;
    ranks_[i].pid = i < previous.size() ? previous[i].pid : 0;
    ++started_count_;
  }
  comm_ready_count_ = 0;
  hang_exemption_recorded_ = false;
  unwatched_ranks_.clear();
  save_ended_ms_ = 0;
  generation_started_ms_ = now;
  generation_spawned_ms_ = 0;
  ending_ = Ending::none;
  generation_start_step_ = previous_newest;
  generation_start_checkpoint_ = latest_checkpoint_step_;
  std::string replaced;
  for (int rank : in_place.replaced) replaced += (replaced.empty() ? "" : ",") + std::to_string(rank);
  set_state(RunState::launching, "in-place recovery: rank(s) " + replaced +
                                     " replaced; the other workers are carried over to generation " +
                                     std::to_string(generation_));
  std::vector<std::string> hosts;
  for (const plan::PlanHost& host : plan_.hosts) hosts.push_back(host.entry.name);
  record(events::PlanGeneration{generation_, plan_.world_size, plan_.data, plan_.tensor, plan_.pipeline,
                                plan_.grad_accum, -1, hosts}
             .to_json());
  std::vector<std::string> live = live_hosts();
  in_place.awaiting_carry = std::set<std::string>(live.begin(), live.end());
  if (recovery_) {
    recovery_->resume_step = -1;
    recovery_->stop_sent_ms = in_place.decided_ms;
    recovery_->released_ms = now;
    recovery_->spawned_ms = now;
  }
  out_.push_back(ContinueInPlace{in_place.from_gen, generation_, plan_, in_place.replaced, live, restarts_});
}

void Supervisor::fall_back_from_in_place(const std::string& why) {
  record(events::RecoveryFallback{generation_, why}.to_json());
  in_place_.reset();
  if (recovery_) {
    recovery_->fallback = why;
    recovery_->action = to_string(RecoveryAction::restart);
  }
  stop_generation(Ending::recover, ExitCode::job_failed,
                  "the in-place recovery could not finish: " + why + "; restarting every worker");
}

bool Supervisor::in_place_past_deadline(int64_t now) {
  if (!in_place_ || now <= in_place_->deadline_ms) return false;
  std::string missing;
  for (size_t i = 0; i < ranks_.size(); ++i) {
    if (!ranks_[i].comm_ready) missing += (missing.empty() ? "" : ",") + std::to_string(i);
  }
  fall_back_from_in_place("not finished within " + format_duration(in_place_timeout()) +
                          " (elastic.in_place_timeout)" +
                          (in_place_->awaiting_exit ? "; the killed rank's exit was never seen"
                           : missing.empty()        ? ""
                                                    : "; no communicator from rank(s) " + missing));
  return true;
}

void Supervisor::on(const SurvivorsCarriedOver& event) {
  if (!in_place_ || event.gen != generation_) return;
  record(events::RecoveryCarriedOver{event.gen, event.host, event.ranks, event.pids}.to_json());
  std::set<int> carried(event.ranks.begin(), event.ranks.end());
  std::string missing;
  for (size_t i = 0; i < plan_.ranks.size(); ++i) {
    bool replaced = std::find(in_place_->replaced.begin(), in_place_->replaced.end(), static_cast<int>(i)) !=
                    in_place_->replaced.end();
    if (plan_.ranks[i].host != event.host || replaced) continue;
    if (!carried.count(static_cast<int>(i))) missing += (missing.empty() ? "" : ",") + std::to_string(i);
  }
  for (size_t k = 0; k < event.ranks.size() && k < event.pids.size(); ++k) {
    if (slot(event.ranks[k])) ranks_[static_cast<size_t>(event.ranks[k])].pid = static_cast<int>(event.pids[k]);
  }
  if (!missing.empty()) {
    fall_back_from_in_place("rank(s) " + missing + " on " + event.host +
                            " had ended before they could be carried over to generation " + std::to_string(event.gen));
    return;
  }
  in_place_->awaiting_carry.erase(event.host);
  if (in_place_->awaiting_carry.empty()) in_place_->carried_ms = clock_.monotonic_ms();
}

void Supervisor::add_in_place_phases(nlohmann::json& phases, int64_t now) const {
  // decision → (a hung rank killed) → every host carried its survivors over ("abort": they are
  // told to abandon the step) and the replacement started → every communicator up again → the
  // first step, which begins with the state transfer from a live replica.
  const PendingRecovery& r = *recovery_;
  const InPlace& in_place = *in_place_;
  if (in_place.killed_ms) phases["kill_ms"] = in_place.killed_ms - in_place.decided_ms;
  int64_t continued_ms = in_place.killed_ms ? in_place.killed_ms : in_place.decided_ms;
  if (in_place.carried_ms) phases["abort_ms"] = in_place.carried_ms - continued_ms;
  phases["spawn_ms"] = r.started_ms - r.spawned_ms;
  int64_t all_there = std::max({r.started_ms, in_place.carried_ms, continued_ms});
  phases["rendezvous_ms"] = std::max<int64_t>(0, r.comm_ready_ms - all_there);
  phases["state_and_first_step_ms"] = now - r.comm_ready_ms;
}

}  // namespace dtrain::supervisor
