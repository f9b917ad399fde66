// The supervisor's machinery that the table's cells share: starting, stopping and finishing
// generations, carrying out recovery decisions, and completing a recovery. The table is
// supervisor_table.cpp; its cells are supervisor_events.cpp and supervisor_in_place.cpp.
#include "launcher/supervisor/supervisor.h"

#include "launcher/base/duration.h"
#include "launcher/events/events.h"

#include <algorithm>

namespace dtrain::supervisor {

events::FailureCause Supervisor::event_cause(const RootCause& cause) {
  // Rank (with local_rank) only for a rank's failure, pid only for a process that ran.
  events::FailureCause out{cause.kind, cause.host, cause.detail};
  if (cause.rank >= 0) {
    out.rank = cause.rank;
    out.local_rank = cause.local_rank;
  }
  if (cause.pid > 0) out.pid = cause.pid;
  out.code = cause.code;
  out.signal = cause.signal;
  out.traceback = cause.traceback;
  return out;
}

Supervisor::Supervisor(spec::JobSpec spec, plan::RankPlan initial_plan, const Clock& clock)
    : spec_(std::move(spec)), plan_(std::move(initial_plan)), clock_(clock), hang_timeouts_(spec_) {
  // Hosts the first plan already does without (quarantined in the registry when the run was
  // planned): every later plan leaves them out too, as it does a host excluded during the run.
  excluded_.insert(plan_.without.begin(), plan_.without.end());
}

std::vector<Action> Supervisor::resume_from(const ResumeFrom& from) {
  out_.clear();
  committed_steps_ = std::set<int64_t>(from.committed_steps.begin(), from.committed_steps.end());
  latest_checkpoint_step_ = committed_steps_.empty() ? -1 : *committed_steps_.rbegin();
  // The dead supervisor's last generation, whose ranks are not known here: the next is one more.
  gen_ = make_generation(std::max(-1, from.last_generation), 0, clock_.monotonic_ms(), -1, latest_checkpoint_step_, spec_);
  restarts_ = from.restarts;
  if (!from.supervisor_lost) return std::move(out_);

  RootCause cause;
  cause.kind = FailureKind::supervisor_lost;
  cause.host = from.previous_host;
  cause.pid = from.previous_pid;
  int64_t silent_ms = std::max<int64_t>(0, clock_.wall_ms() - from.waited_ms - from.last_seen_wall_ms);
  cause.detail = "supervisor pid " + std::to_string(from.previous_pid) + " on " + from.previous_host +
                 " is gone (its last state write was " + format_duration(Millis(silent_ms / 100 * 100)) +
                 " before `dtrain resume`)";
  cause.observed_ms = from.last_seen_wall_ms;
  root_cause_ = cause;
  nlohmann::json detected = events::FailureDetected{event_cause(cause), std::nullopt, "dtrain resume"}.to_json();
  add_incident(detected);
  record(detected);

  int64_t now = clock_.monotonic_ms();
  PendingRecovery pending;
  pending.cause = cause;
  pending.detected_ms = now - from.waited_ms;
  pending.stop_sent_ms = pending.detected_ms;
  pending.released_ms = now;
  pending.last_step = std::max(from.last_step, latest_checkpoint_step_);
  recovery_ = pending;
  // The catalogue's "why" is always there: for a resume, who decided and from where it goes on.
  record(events::RecoveryStarted{event_cause(cause), restarts_, "resume",
                                 "`dtrain resume` continues the run from its newest complete checkpoint"}
             .to_json());
  return std::move(out_);
}

// ---- helpers --------------------------------------------------------------------------------

void Supervisor::set_phase(Phase next, const std::string& why) {
  RunState before = reported(phase_);
  phase_ = next;
  if (reported(next) != before) record(events::RunState{to_string(reported(next)), why}.to_json());
}

void Supervisor::add_incident(nlohmann::json incident) {
  // Each incident names its own generation: the summary lists them in order.
  if (gen_.number >= 0 && !incident.contains("gen")) incident["gen"] = gen_.number;
  incidents_.push_back(std::move(incident));
}

void Supervisor::record(nlohmann::json event) {
  if (gen_.number >= 0 && !event.contains("gen")) event["gen"] = gen_.number;
  out_.push_back(RecordEvent{std::move(event)});
}

RootCause Supervisor::rank_cause(events::FailureKind kind, int rank, std::string detail) const {
  // The one place a rank's root cause is filled: where it ran, its pid, observed now.
  const plan::RankSlot* where = slot(rank);
  RootCause cause;
  cause.kind = kind;
  cause.host = where ? where->host : "";
  cause.rank = rank;
  cause.local_rank = where ? where->local_rank : -1;
  cause.pid = rank >= 0 && rank < static_cast<int>(gen_.ranks.size()) ? gen_.ranks[static_cast<size_t>(rank)].pid : 0;
  cause.detail = std::move(detail);
  cause.observed_ms = clock_.wall_ms();
  return cause;
}

RankStatus* Supervisor::rank_of(int gen, int rank) {
  if (gen != gen_.number || !slot(rank) || rank >= static_cast<int>(gen_.ranks.size())) return nullptr;
  return &gen_.ranks[static_cast<size_t>(rank)];
}

const plan::RankSlot* Supervisor::slot(int rank) const {
  if (rank < 0 || rank >= static_cast<int>(plan_.ranks.size())) return nullptr;
  return &plan_.ranks[static_cast<size_t>(rank)];
}

std::vector<std::string> Supervisor::live_hosts() const {
  std::vector<std::string> hosts;
  for (const plan::PlanHost& host : plan_.hosts) {
    if (connected_.count(host.entry.name)) hosts.push_back(host.entry.name);
  }
  return hosts;
}

int64_t Supervisor::newest_step() const {
  int64_t newest = -1;
  for (const RankStatus& rank : gen_.ranks) newest = std::max(newest, rank.step);
  return newest;
}

GenerationProgress Supervisor::progress_of_generation() const {
  int64_t ended = recovery_ && recovery_->detected_ms > 0 ? recovery_->detected_ms : clock_.monotonic_ms();
  return {gen_.start_step, newest_step(), gen_.start_checkpoint, latest_checkpoint_step_, ended - gen_.started_ms,
          gen_.hangs.limits().hang_timeout_ms};
}

// ---- generations ------------------------------------------------------------------------------

void Supervisor::start_when_all_connected() {
  // Not every planned host can have connected yet while fewer hosts connected or were left out
  // than the plan has: the scan below (a lookup per host, per host's hello and health report) is
  // then skipped. It made the start quadratic: 15 % of the loop at 8,192 hosts.
  if (connected_.size() + excluded_.size() < plan_.hosts.size()) return;
  for (const plan::PlanHost& host : plan_.hosts) {
    if (excluded_.count(host.entry.name)) continue;  // lost while connecting: replanned below
    if (!connected_.count(host.entry.name) || awaiting_start_health(host.entry.name)) return;
  }
  if (phase_ != Phase::connecting) return;
  if (!lost_while_connecting_.empty()) {
    // Every host left has answered: one plan without all those lost meanwhile. It may take in
    // spares that are still connecting; this is asked again as they do.
    decide_losses_while_connecting();
    return;
  }
  if (!stacks_allow_start()) return;
  start_generation(plan_);
}

void Supervisor::watch_generation() {
  hang_timeouts_.new_generation(gen_.number, gen_.ranks.size());
  gen_.hangs.set_limits(hang_timeouts_.limits());
}

void Supervisor::update_hang_timeouts() {
  gen_.hangs.set_limits(hang_timeouts_.limits());
  if (auto changed = hang_timeouts_.take_change()) record(changed->to_json());
}

void Supervisor::start_generation(plan::RankPlan next_plan) {
  const int number = gen_.number + 1;
  plan_ = std::move(next_plan);
  int64_t resume_step = number == 0 ? -1 : latest_checkpoint_step_;
  gen_ = make_generation(number, plan_.ranks.size(), clock_.monotonic_ms(), resume_step, latest_checkpoint_step_, spec_);
  watch_generation();
  set_phase(Phase::launching, number == 0 ? "all hosts connected" : "recovery");
  std::vector<std::string> hosts;
  for (const plan::PlanHost& host : plan_.hosts) hosts.push_back(host.entry.name);
  record(events::PlanGeneration{number, plan_.world_size, plan_.data, plan_.tensor, plan_.pipeline, plan_.grad_accum,
                                resume_step, std::move(hosts)}
             .to_json());
  update_hang_timeouts();
  if (recovery_) {
    recovery_->resume_step = resume_step;
    recovery_->spawned_ms = clock_.monotonic_ms();
  }
  out_.push_back(StartGeneration{number, plan_, resume_step, restarts_});
}

void Supervisor::stop_generation(Ending ending, ExitCode exit_code, const std::string& decision) {
  ending_ = ending;
  ending_code_ = exit_code;
  std::string why = ending == Ending::succeed   ? "every worker exited 0"
                    : ending == Ending::stop    ? "stop requested"
                    : ending == Ending::preempt ? "preempted"
                                                : "failure detected; giving up";
  set_phase(Phase::stopping, decision.empty() ? why : why + " (" + decision + ")");
  send_stop();
}

void Supervisor::stop_to_recover(const std::string& decision) {
  set_phase(Phase::recovering, "failure detected; restarting (" + decision + ")");
  send_stop();
}

void Supervisor::send_stop() {
  std::vector<std::string> hosts = live_hosts();
  awaiting_release_ = std::set<std::string>(hosts.begin(), hosts.end());
  stop_sent_ms_ = clock_.monotonic_ms();
  if (recovery_) recovery_->stop_sent_ms = stop_sent_ms_;
  if (gen_.number < 0 || hosts.empty()) {
    finish_stop();
    return;
  }
  out_.push_back(StopGeneration{gen_.number, stop_grace_ms_ > 0 ? stop_grace_ms_ : spec_.stop_grace.count(), hosts});
}

void Supervisor::finish_stop() {
  awaiting_release_.clear();
  if (phase_ == Phase::recovering) {
    finish_recovery();
    return;
  }
  switch (ending_) {
    case Ending::succeed:
      set_phase(Phase::succeeded, "every worker exited 0 and every host released");
      out_.push_back(FinishRun{RunState::succeeded, ExitCode::ok});
      return;
    case Ending::stop:
      set_phase(Phase::stopped, "stop requested");
      out_.push_back(FinishRun{RunState::stopped, ExitCode::interrupted});
      return;
    case Ending::preempt:
      set_phase(Phase::preempted, "preempted");
      out_.push_back(FinishRun{RunState::preempted, ExitCode::preempted});
      return;
    case Ending::fail:
      set_phase(Phase::failed, give_up_reason_.empty() ? "failure could not be recovered" : give_up_reason_);
      out_.push_back(FinishRun{RunState::failed, ending_code_});
      return;
  }
}

void Supervisor::finish_recovery() {
  // The old generation is gone everywhere: start the next one, as decided, unless this was one
  // generation too many without progress.
  recovery_->released_ms = clock_.monotonic_ms();
  // Beats are rate-limited, so a committed checkpoint can be newer than the newest beat.
  recovery_->last_step = std::max({recovery_->last_step, newest_step(), latest_checkpoint_step_});
  CrashLoopVerdict verdict = judge_crash_loop(progress_of_generation(), generations_without_progress_, spec_);
  generations_without_progress_ = verdict.generations_without_progress;
  if (verdict.give_up) {
    record(events::FailureCrashLoop{generations_without_progress_, *verdict.give_up}.to_json());
    ending_ = Ending::fail;
    ending_code_ = ExitCode::crash_loop;
    give_up_reason_ = "crash loop: " + *verdict.give_up;
    set_phase(Phase::failed, give_up_reason_);
    out_.push_back(FinishRun{RunState::failed, ExitCode::crash_loop});
    return;
  }
  start_next_generation();
}

void Supervisor::start_next_generation() {
  if (!recovery_->next_plan) {
    give_up_reason_ = recovery_->no_plan;
    record(events::FailureUnrecoverable{recovery_->no_plan}.to_json());
    set_phase(Phase::failed, recovery_->no_plan);
    out_.push_back(FinishRun{RunState::failed, ExitCode::hosts_lost});
    return;
  }
  if (health_gate_before_restart()) return;  // the answers come back as HostHealthReported
  if (recovery_->health_asked_ms > 0 && recovery_->health_ms == 0) {
    recovery_->health_ms = std::max<int64_t>(1, clock_.monotonic_ms() - recovery_->health_asked_ms);
  }
  if (recovery_->membership_change) {
    record(events::PlanChanged{plan::diff_text(plan_, *recovery_->next_plan),
                               std::vector<std::string>(excluded_.begin(), excluded_.end())}
               .to_json());
  }
  start_generation(*recovery_->next_plan);
}

// ---- failures ---------------------------------------------------------------------------------

void Supervisor::handle_failure(RootCause cause, bool host_lost) {
  // During an in-place recovery the failure that started it stays the root cause: what fails
  // meanwhile (a survivor that cannot rejoin) follows from it.
  const bool in_place = replacing();
  if (!in_place) root_cause_ = cause;
  int64_t now_wall = clock_.wall_ms();
  std::optional<int64_t> latency_ms;
  if (cause.observed_ms > 0) latency_ms = std::max<int64_t>(0, now_wall - cause.observed_ms);
  nlohmann::json detected = events::FailureDetected{event_cause(cause), latency_ms, std::nullopt}.to_json();
  add_incident(detected);
  record(detected);

  std::optional<std::string> in_place_failed;
  if (in_place) {
    InPlaceEnd end = end_in_place_on_failure(cause, host_lost);
    if (end.fall_back) {
      fall_back_from_in_place(end.why);
      return;
    }
    record(events::RecoveryFallback{gen_.number, end.why}.to_json());
    in_place_failed = end.why;
  }

  // Facts for the policy's one decision (recovery_decision.h); the rest is carrying it out.
  FailureFacts facts{cause.host, host_lost, 0, plan_.world_size};
  if (!host_lost && !cause.host.empty()) facts.host_failures = ++host_failures_[cause.host];
  facts.single_rank = !host_lost && cause.rank >= 0 &&
                      (cause.kind == FailureKind::worker_exit || cause.kind == FailureKind::worker_hang || cause.kind == FailureKind::worker_protocol);
  facts.plan = &plan_;
  facts.rank = cause.rank;
  int64_t now = clock_.monotonic_ms();
  count_failure_for_quarantine(cause, now_wall);
  FailureHistory history{excluded_, restarts_in_window(restart_times_ms_, now, spec_)};
  history.in_place_failed = in_place_failed.has_value();
  RecoveryDecision decision = decide_recovery(facts, history, spec_);

  if (decision.exclude_host) {
    excluded_.insert(cause.host);
    if (!host_lost) record(events::HostExcluded{{cause.host, facts.host_failures, decision.why}}.to_json());
  }
  if (decision.exclusion_refused && exclusion_refused_.insert(cause.host).second) {
    record(events::HostExclusionSkipped{{cause.host, facts.host_failures, decision.why}}.to_json());
  }
  if (decision.action == RecoveryAction::give_up) {
    give_up(decision);
    return;
  }
  if (decision.uses_restart) {
    restart_times_ms_.push_back(now);
    ++restarts_;
  }
  PendingRecovery pending;
  pending.cause = cause;
  pending.detected_ms = now;
  pending.last_step = newest_step();
  pending.membership_change = decision.action == RecoveryAction::replace || decision.action == RecoveryAction::shrink;
  pending.action = to_string(decision.action);
  pending.fallback = in_place_failed;
  pending.next_plan = decision.next_plan;
  recovery_ = pending;
  record(events::RecoveryStarted{event_cause(cause), restarts_, to_string(decision.action), decision.why}.to_json());
  if (decision.action != RecoveryAction::in_place) {
    stop_to_recover(decision.why);
    return;
  }
  start_in_place(cause, host_lost, decision, now);
}

void Supervisor::give_up(const RecoveryDecision& decision) {
  give_up_reason_ = decision.why;
  if (decision.exit_code == ExitCode::hosts_lost) {
    record(events::FailureUnrecoverable{decision.why}.to_json());
  } else {
    record(events::FailureBudgetExhausted{spec_.elastic.max_restarts, spec_.elastic.restart_window.count(), decision.why}
               .to_json());
  }
  stop_generation(Ending::fail, decision.exit_code, decision.why);
}

void Supervisor::replan_after_exclusion() {
  if (!recovery_) return;
  recovery_->membership_change = true;
  Result<plan::RankPlan> next = replan_without(excluded_, spec_);
  if (next) {
    recovery_->next_plan = std::move(next).value();
  } else {
    recovery_->next_plan.reset();
    recovery_->no_plan = next.error().message;
  }
}

// ---- recovery completed -----------------------------------------------------------------------

void Supervisor::complete_recovery(int64_t step, bool in_place, int64_t at_ms) {
  // First step of the new generation: the recovery is complete.
  int64_t now = at_ms > 0 ? at_ms : clock_.monotonic_ms();
  if (in_place) recovery_->resume_step = step - 1;  // the survivors' newest completed step
  const PendingRecovery& r = *recovery_;
  int64_t resume_from = std::max<int64_t>(r.resume_step, 0);
  nlohmann::json phases = {
      {"detect_ms", r.cause.observed_ms > 0
                        ? std::max<int64_t>(0, clock_.wall_ms() - (now - r.detected_ms) - r.cause.observed_ms)
                        : 0}};
  if (in_place) {
    add_in_place_phases(phases, now);
  } else {
    phases["stop_ms"] = r.released_ms - r.stop_sent_ms;
    phases["replan_ms"] = r.spawned_ms - r.released_ms - r.health_ms;
    if (r.health_ms > 0) phases["health_ms"] = r.health_ms;
    phases["spawn_ms"] = r.started_ms - r.spawned_ms;
    // rendezvous: every rank started → every communicator up, when the workers say so
    // (comm.ready); otherwise it stays inside first_step_ms.
    if (r.comm_ready_ms) {
      phases["rendezvous_ms"] = std::max<int64_t>(0, r.comm_ready_ms - r.started_ms);
      phases["first_step_ms"] = now - std::max(r.comm_ready_ms, r.started_ms);
    } else {
      phases["first_step_ms"] = now - r.started_ms;
    }
  }
  phases["total_ms"] = now - r.detected_ms;
  int64_t steps_lost = std::max<int64_t>(0, r.last_step - resume_from);
  // In place, one survivor may have been a step ahead: its all-reduce of the next step finished
  // while a peer's still waited on the failed rank (a SIGSTOP mid-ring does it). The survivors'
  // agreement rolled it back to the newest step every one of them completed, the resume step;
  // the step it had reported was never a step of the whole job, and redoing it loses nothing.
  if (in_place) steps_lost = std::max<int64_t>(0, steps_lost - 1);
  events::RecoveryCompleted completed{r.cause.kind,
                                             event_cause(r.cause),
                                             std::move(phases),
                                             r.resume_step,
                                             r.last_step,
                                             steps_lost,
                                             plan_.world_size,
                                             restarts_,
                                             r.action.empty() ? "restart" : r.action,
                                             r.fallback};
  record(completed.to_json());
  last_recovery_ = CompletedRecovery{gen_.number, std::move(completed)};
  recovery_.reset();
}

void Supervisor::complete_recovery_at_success() {
  PendingRecovery& r = *recovery_;
  int64_t now = clock_.monotonic_ms();
  if (!r.started_ms) r.started_ms = now;
  if (replacing()) {
    // The survivors resumed from the newest step when they were carried over (the generation's
    // start step); every communicator was up by now.
    if (!r.comm_ready_ms) r.comm_ready_ms = now;
    complete_recovery(gen_.start_step + 1, true, now);
  } else if (r.first_step_seen_ms) {
    if (!r.comm_ready_ms) r.comm_ready_ms = r.first_step_seen_ms;
    complete_recovery(r.first_step, false, r.first_step_seen_ms);
  } else {
    complete_recovery(std::max(newest_step(), r.resume_step + 1), false, now);
  }
}

// ---- launch deadlines -------------------------------------------------------------------------

Millis Supervisor::launch_deadline() const {
  // A live agent answers a port reservation and reports `started` within moments of the
  // request (fork + exec); one that is silent longer than heartbeat.timeout would be lost
  // anyway. Twice that leaves room for a loaded host without letting a launch hang for ever.
  return 2 * spec_.heartbeat.timeout;
}

void Supervisor::check_launch_deadline(int64_t now) {
  int64_t deadline = launch_deadline().count();
  std::string limit = format_duration(launch_deadline()) + " (2 × heartbeat.timeout)";
  RootCause cause;
  cause.kind = FailureKind::launch_timeout;
  if (gen_.spawned_ms == 0) {
    if (now - gen_.started_ms <= deadline) return;
    // Nothing was spawned: rank 0's host never answered the port reservation.
    cause.host = plan_.ranks.empty() ? "" : plan_.ranks.front().host;
    cause.detail = "port reservation: no reply from " + cause.host + " within " + limit + "; generation " +
                   std::to_string(gen_.number) + " was not spawned";
    cause.observed_ms = clock_.wall_ms() - (now - gen_.started_ms - deadline);
  } else {
    if (now - gen_.spawned_ms <= deadline) return;
    // Blame the first host (in plan order) with a rank that never reported `started`.
    std::vector<int> missing;
    for (size_t i = 0; i < gen_.ranks.size(); ++i) {
      if (gen_.ranks[i].state != RankState::starting) continue;
      if (missing.empty()) cause.host = plan_.ranks[i].host;
      if (plan_.ranks[i].host == cause.host) missing.push_back(static_cast<int>(i));
    }
    if (missing.empty()) return;  // every rank reported; the transition to running is pending
    std::string ranks;
    for (int rank : missing) ranks += (ranks.empty() ? "" : ",") + std::to_string(rank);
    cause.rank = missing.front();
    cause.local_rank = plan_.ranks[static_cast<size_t>(cause.rank)].local_rank;
    cause.detail = "spawn → started: rank" + std::string(missing.size() > 1 ? "s " : " ") + ranks + " on " +
                   cause.host + " not started within " + limit;
    cause.observed_ms = clock_.wall_ms() - (now - gen_.spawned_ms - deadline);
  }
  handle_failure(cause, false);
}

}  // namespace dtrain::supervisor
