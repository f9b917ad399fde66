// The cells of the supervisor's table (supervisor_table.cpp names which runs in which phase):
// one handler per distinct behaviour of an event. In-place recovery's own cells are in
// supervisor_in_place.cpp; the machinery they share is supervisor.cpp.
#include "launcher/supervisor/supervisor.h"

#include "launcher/base/duration.h"
#include "launcher/events/events.h"
#include "launcher/supervisor/failure_blame.h"

#include <algorithm>

namespace dtrain::supervisor {

// ---- hosts ------------------------------------------------------------------------------------

void Supervisor::connect_host(const HostConnected& event) {
  connected_.insert(event.host);
  note_stack(event);
  health_at_connect(event);
}

void Supervisor::connect_host_and_start(const HostConnected& event) {
  connect_host(event);
  start_when_all_connected();
}

namespace {

/// The failure of a lost host: silence began when it was last heard from, and that is when the
/// failure was observable.
RootCause host_lost_cause(const HostLost& event, int64_t now_wall_ms) {
  RootCause cause;
  cause.kind = FailureKind::host_lost;
  cause.host = event.host;
  cause.detail = event.reason;
  cause.observed_ms = now_wall_ms - std::max<int64_t>(0, event.silent_ms);
  return cause;
}

}  // namespace

/// Records the loss (every phase does); true when the host is in the plan (not a spare we did not need).
bool Supervisor::note_host_lost(const HostLost& event) {
  bool was_connected = connected_.erase(event.host) > 0;
  std::optional<int64_t> silent_ms;
  if (event.silent_ms >= 0) silent_ms = event.silent_ms;
  record(events::HostLost{event.host, event.reason, was_connected, silent_ms}.to_json());
  return std::any_of(plan_.hosts.begin(), plan_.hosts.end(),
                     [&](const plan::PlanHost& h) { return h.entry.name == event.host; });
}

void Supervisor::lose_host_before_start(const HostLost& event) {
  awaiting_health_.erase(event.host);
  if (!note_host_lost(event)) return;
  excluded_.insert(event.host);
  lost_while_connecting_.push_back(event);
  // One plan for every host lost while the others connect, made when they have (below): a plan
  // per loss costs O(ranks) each, and hosts that fail to connect tend to fail together (an
  // open-file limit, a switch, a bad image): at 4,096 hosts that was 0.5-1 s of the loop per loss.
  if (!may_start_without(excluded_, spec_)) {
    decide_losses_while_connecting();
    return;
  }
  start_when_all_connected();
}

void Supervisor::decide_losses_while_connecting() {
  if (lost_while_connecting_.empty()) return;
  const HostLost last = lost_while_connecting_.back();
  std::vector<std::string> lost;
  for (const HostLost& event : lost_while_connecting_) lost.push_back(event.host);
  lost_while_connecting_.clear();
  RecoveryDecision decision = decide_loss_while_connecting(lost, excluded_, plan_.world_size, spec_);
  if (decision.next_plan) {
    record(events::PlanChanged{plan::diff_text(plan_, *decision.next_plan),
                               std::vector<std::string>(excluded_.begin(), excluded_.end())}
               .to_json());
    plan_ = std::move(*decision.next_plan);
    start_when_all_connected();
    return;
  }
  RootCause cause = host_lost_cause(last, clock_.wall_ms());
  root_cause_ = cause;
  give_up_reason_ = decision.why;
  add_incident(event_cause(cause).to_json());
  record(events::FailureDetected{event_cause(cause), std::nullopt, std::nullopt}.to_json());
  stop_generation(Ending::fail, decision.exit_code);
}

void Supervisor::fail_lost_host(const HostLost& event) {
  if (note_host_lost(event)) handle_failure(host_lost_cause(event, clock_.wall_ms()), true);
}

void Supervisor::lose_host_while_recovering(const HostLost& event) {
  const bool was_checking = awaiting_health_.erase(event.host) > 0;
  if (!note_host_lost(event) && !was_checking) return;
  excluded_.insert(event.host);
  replan_after_exclusion();
  if (recovery_ && recovery_->released_ms > 0) {
    // Released already: the next generation waited only for health answers.
    if (awaiting_health_.empty()) start_next_generation();
    return;
  }
  awaiting_release_.erase(event.host);
  if (awaiting_release_.empty()) finish_stop();
}

void Supervisor::lose_host_while_stopping(const HostLost& event) {
  if (!note_host_lost(event)) return;
  awaiting_release_.erase(event.host);
  if (awaiting_release_.empty()) finish_stop();
}

void Supervisor::host_released(const GenerationReleased& event) {
  if (event.gen != gen_.number && event.gen != -1) return;
  awaiting_release_.erase(event.host);
  if (awaiting_release_.empty()) finish_stop();
}

// ---- workers ----------------------------------------------------------------------------------

void Supervisor::note_started(const WorkerStarted& event) {
  RankStatus* rank = rank_of(event.gen, event.rank);
  if (!rank) return;
  rank->pid = event.pid;
  if (rank->state == RankState::starting) {
    rank->state = RankState::running;
    ++gen_.started;
  }
  const plan::RankSlot* where = slot(event.rank);
  record(events::WorkerStarted{event.rank, where->host, where->local_rank, event.pid}.to_json());
}

void Supervisor::start_rank_then(const WorkerStarted& event, Phase when_all_started) {
  note_started(event);
  if (gen_.started != static_cast<int>(gen_.ranks.size())) return;
  if (recovery_) recovery_->started_ms = clock_.monotonic_ms();
  set_phase(when_all_started, "every worker started");
}

void Supervisor::launch_started(const WorkerStarted& event) { start_rank_then(event, Phase::running); }

void Supervisor::note_spawn_failed(const WorkerSpawnFailed& event) {
  if (RankStatus* rank = rank_of(event.gen, event.rank)) rank->state = RankState::failed;
}

void Supervisor::give_up_on_spawn_failure(const WorkerSpawnFailed& event) {
  RankStatus* rank = rank_of(event.gen, event.rank);
  if (!rank) return;
  rank->state = RankState::failed;
  RootCause cause = rank_cause(FailureKind::worker_spawn, event.rank, event.error);
  cause.pid = 0;  // it never ran
  RecoveryDecision decision = decide_spawn_failure(cause);
  root_cause_ = cause;
  nlohmann::json detected = events::FailureDetected{event_cause(cause), std::nullopt, std::nullopt}.to_json();
  add_incident(detected);
  record(detected);
  stop_generation(Ending::fail, decision.exit_code, decision.why);
}

namespace {

bool clean_exit(const WorkerExited& event) { return event.code && *event.code == 0 && !event.signal; }

}  // namespace

RootCause Supervisor::exit_cause(const WorkerExited& event) const {
  RootCause cause = rank_cause(FailureKind::worker_exit, event.rank,
                               event.signal ? "killed by " + *event.signal
                                            : "exit code " + std::to_string(event.code.value_or(-1)));
  cause.pid = event.pid;
  cause.code = event.signal ? std::nullopt : event.code;
  cause.signal = event.signal;
  // The exception the worker recorded says more than its exit status (which stays in
  // code/signal): "ValueError: bad batch".
  if (event.error_message) {
    cause.detail = event.error_type ? *event.error_type + ": " + *event.error_message : *event.error_message;
    cause.traceback = event.traceback;
  }
  cause.observed_ms = event.observed_ms;
  cause.reads_as_lost_peer = reads_as_lost_peer(event.last_output, cause.detail);
  return cause;
}

void Supervisor::worker_exited(const WorkerExited& event) {
  RankStatus* rank = rank_of(event.gen, event.rank);
  if (!rank) return;
  rank->exit_code = event.code;
  rank->exit_signal = event.signal;
  if (!clean_exit(event)) {
    rank->state = RankState::failed;
    handle_failure(exit_cause(event), false);
    return;
  }
  if (rank->state != RankState::exited) ++gen_.exited;
  rank->state = RankState::exited;
  // Every rank's exit comes here: the scan only once the count says it may succeed (at 131,072
  // ranks, a scan per exit was a quarter of the supervisor's CPU while a job ended).
  if (gen_.exited >= static_cast<int>(gen_.ranks.size()) &&
      std::all_of(gen_.ranks.begin(), gen_.ranks.end(), [](const RankStatus& r) { return r.state == RankState::exited; })) {
    if (recovery_) complete_recovery_at_success();
    stop_generation(Ending::succeed, ExitCode::ok);
  }
}

void Supervisor::exit_while_stopping(const WorkerExited& event) {
  RankStatus* rank = rank_of(event.gen, event.rank);
  if (!rank) return;
  rank->exit_code = event.code;
  rank->exit_signal = event.signal;
  rank->state = clean_exit(event) ? RankState::exited : RankState::killed;
  if (clean_exit(event) || !root_cause_ || root_cause_->kind != FailureKind::worker_exit) return;
  // Exits after we decided to stop are consequences, with two exceptions that make this one the
  // real root cause. One that the agent killed (for our stop) is a consequence whatever its time
  // stamp says.
  RootCause cause = exit_cause(event);
  std::string why;
  int64_t stop_sent_wall = clock_.wall_ms() - (clock_.monotonic_ms() - stop_sent_ms_);
  int64_t latest_possible = event.observed_ms + std::max<int64_t>(0, event.observed_uncertainty_ms);
  if (!event.killed_by_agent && event.observed_ms > 0 && latest_possible < stop_sent_wall &&
      latest_possible < root_cause_->observed_ms) {
    // The agent saw it before we sent the stop and earlier than the failure we blamed.
    why = "rank " + std::to_string(cause.rank) + " failed earlier (" + cause.detail + ") than the failure first reported";
  } else if (root_cause_->reads_as_lost_peer && !cause.reads_as_lost_peer && !event.signal) {
    // The rank we blamed names a lost peer; this one exited on its own (a status, not our
    // signal) with words of its own: it is the peer that went first (failure_blame.h).
    why = "rank " + std::to_string(cause.rank) + " failed on its own (" + cause.detail + "); rank " +
          std::to_string(root_cause_->rank) + ", reported first, names a lost peer";
  } else {
    return;
  }
  root_cause_ = cause;
  if (recovery_) recovery_->cause = cause;
  record(events::FailureRootCause{cause.rank, cause.host, why}.to_json());
}

void Supervisor::misbehaved(const WorkerMisbehaved& event) {
  RankStatus* rank = rank_of(event.gen, event.rank);
  if (!rank) return;
  rank->state = RankState::failed;
  handle_failure(rank_cause(FailureKind::worker_protocol, event.rank, event.detail), false);
}

bool Supervisor::note_progress(const WorkerProgress& event) {
  RankStatus* rank = rank_of(event.gen, event.rank);
  if (!rank) return false;
  int64_t now = clock_.monotonic_ms();
  bool timeouts_fed = false;
  if (event.step != rank->step) {
    // Quiet since as the hang watch measures it: the interval an auto hang_timeout learns from.
    hang_timeouts_.step_changed(event.rank, now - std::max(gen_.hangs.quiet_since(*rank), gen_.started_ms));
    rank->step = event.step;
    rank->step_changed_ms = now;
    timeouts_fed = true;
  }
  if (event.in_checkpoint && *event.in_checkpoint != rank->in_checkpoint) {
    if (!*event.in_checkpoint) hang_timeouts_.save_took(now - rank->phase_changed_ms);
    rank->in_checkpoint = *event.in_checkpoint;
    rank->phase_changed_ms = now;
    if (!rank->in_checkpoint) gen_.hangs.save_ended(now);
    timeouts_fed = true;
  }
  if (timeouts_fed) update_hang_timeouts();
  return true;
}

void Supervisor::note_beat(const WorkerProgress& event) { note_progress(event); }

void Supervisor::progress(const WorkerProgress& event) {
  if (note_progress(event) && recovery_ && recovery_->started_ms && event.step > recovery_->resume_step) {
    // Workers that say comm.ready said it before this step; a rank on another host whose
    // comm.ready is still on its way would otherwise leave the rendezvous phase out.
    const bool comm_ready_due = gen_.comm_ready > 0 && gen_.comm_ready < static_cast<int>(gen_.ranks.size());
    if (comm_ready_due) {
      if (!recovery_->first_step_seen_ms) {
        recovery_->first_step_seen_ms = clock_.monotonic_ms();
        recovery_->first_step = event.step;
      }
      return;
    }
    complete_recovery(event.step, false);
  }
}

void Supervisor::comm_ready(const WorkerCommReady& event) {
  RankStatus* rank = rank_of(event.gen, event.rank);
  if (!rank || rank->comm_ready) return;
  rank->comm_ready = true;
  if (++gen_.comm_ready != static_cast<int>(gen_.ranks.size())) return;
  int64_t now = clock_.monotonic_ms();
  record(events::CommReady{gen_.comm_ready, now - gen_.started_ms}.to_json());
  if (!recovery_) return;
  recovery_->comm_ready_ms = now;
  if (recovery_->first_step_seen_ms && recovery_->started_ms) {
    // The first step came first: the rendezvous ended before it, by then at the latest.
    recovery_->comm_ready_ms = std::min(now, recovery_->first_step_seen_ms);
    complete_recovery(recovery_->first_step, false, recovery_->first_step_seen_ms);
  }
}

void Supervisor::stopped_seen(const WorkerStoppedSeen& event) {
  if (RankStatus* rank = rank_of(event.gen, event.rank)) rank->seen_stopped = true;
}

// ---- checkpoints ------------------------------------------------------------------------------

void Supervisor::checkpoint_committed(const CheckpointCommitted& event) {
  if (event.gen != gen_.number) return;
  committed_steps_.insert(event.step);
  latest_checkpoint_step_ = std::max(latest_checkpoint_step_, event.step);
}

void Supervisor::checkpoint_rejected(const CheckpointRejected& event) {
  // Workers fall back to the newest older step that verifies; follow them so that the next
  // resume and this recovery's resume_step/steps_lost tell the truth.
  committed_steps_.erase(event.step);
  latest_checkpoint_step_ = committed_steps_.empty() ? -1 : *committed_steps_.rbegin();
  if (recovery_ && recovery_->resume_step == event.step && event.gen == gen_.number) {
    auto older = committed_steps_.lower_bound(event.step);
    recovery_->resume_step = older == committed_steps_.begin() ? -1 : *std::prev(older);
    gen_.start_step = recovery_->resume_step;
  }
}

// ---- stop requests ----------------------------------------------------------------------------

void Supervisor::stop_run(const StopRequested& event) {
  record(events::RunStopRequested{event.reason}.to_json());
  stop_reason_ = event.reason;
  stop_grace_ms_ = event.grace_ms;
  if (event.preempt) {
    stop_generation(Ending::preempt, ExitCode::preempted);
  } else {
    stop_generation(Ending::stop, ExitCode::interrupted);
  }
}

void Supervisor::stop_while_recovering(const StopRequested& event) {
  record(events::RunStopRequested{event.reason}.to_json());
  stop_reason_ = event.reason;
  ending_ = event.preempt ? Ending::preempt : Ending::stop;
  ending_code_ = event.preempt ? ExitCode::preempted : ExitCode::interrupted;
  set_phase(Phase::stopping, event.reason + " during recovery");
  if (awaiting_release_.empty()) finish_stop();
}

// ---- time -------------------------------------------------------------------------------------

void Supervisor::check_launch(const Tick&) { check_launch_deadline(clock_.monotonic_ms()); }

void Supervisor::watch_hangs(const Tick& tick) {
  int64_t now = clock_.monotonic_ms();
  // A limit set from the step time may be shorter than heartbeat.timeout: while a host of the
  // generation is unheard, its ranks' silence may be its loss, which that timeout decides.
  bool maybe_host_loss = hang_timeouts_.automatic() &&
                         std::any_of(tick.unheard_hosts.begin(), tick.unheard_hosts.end(), [&](const std::string& host) {
                           return std::any_of(plan_.hosts.begin(), plan_.hosts.end(),
                                              [&](const plan::PlanHost& h) { return h.entry.name == host; });
                         });
  HangCheck check = gen_.hangs.check(gen_.ranks, now, maybe_host_loss);
  if (!check.unwatched.empty()) {
    record(events::HangDetectionOff{
        check.unwatched, "no heartbeat with a step from these ranks within heartbeat.hang_timeout (they do not "
                         "speak the worker protocol, or have not made a step yet: a slow import, a long data "
                         "load): until they do, they are not watched for hangs; exits and host loss are "
                         "still detected"}
               .to_json());
  }
  if (!check.watched_again.empty()) {
    record(events::HangDetectionOn{check.watched_again, now - gen_.started_ms,
                                   "these ranks beat with a step now: they are watched for hangs from here on"}
               .to_json());
  }
  if (!check.hang) return;
  const Hang& hang = *check.hang;
  const RankStatus& rank = gen_.ranks[static_cast<size_t>(hang.rank)];
  const std::string& host = plan_.ranks[static_cast<size_t>(hang.rank)].host;
  record(events::WorkerHang{hang.rank, host, rank.pid, rank.step, hang.in_save ? "checkpoint" : "train", hang.silent_ms,
                            hang.limit_ms}
             .to_json());
  out_.push_back(CaptureSample{gen_.number, hang.rank, host, rank.pid});
  std::string detail = hang.in_save ? "checkpoint save at step " + std::to_string(rank.step) + " still running after " +
                                          std::to_string(hang.silent_ms / 1000) + "s (heartbeat.checkpoint_timeout " +
                                          format_duration(Millis(hang.limit_ms)) + ")"
                                    : "no step progress for " + format_duration(Millis(hang.silent_ms), DurationStyle::tenths) +
                                          " at step " + std::to_string(rank.step) + " (heartbeat.hang_timeout " +
                                          format_duration(Millis(hang.limit_ms)) +
                                          (hang_timeouts_.automatic() ? " auto" : "") + ")";
  RootCause cause = rank_cause(FailureKind::worker_hang, hang.rank, detail);
  cause.observed_ms = clock_.wall_ms() - hang.overdue_ms;
  handle_failure(cause, false);
}

void Supervisor::check_connecting(const Tick&) { check_health_deadlines(clock_.monotonic_ms()); }

void Supervisor::check_release(const Tick&) {
  int64_t now = clock_.monotonic_ms();
  if (phase_ == Phase::recovering) check_health_deadlines(now);
  if (awaiting_release_.empty() || now <= stop_deadline_ms(stop_sent_ms_, spec_)) return;
  std::vector<std::string> silent(awaiting_release_.begin(), awaiting_release_.end());
  record(events::ResourcesUnconfirmed{silent, "no release confirmation within stop_grace + heartbeat.timeout"}
             .to_json());
  if (exclude_unconfirmed_hosts(phase_ == Phase::recovering)) {
    excluded_.insert(silent.begin(), silent.end());
    replan_after_exclusion();
  }
  finish_stop();
}

// ---- launch steps -----------------------------------------------------------------------------

void Supervisor::generation_spawned(const GenerationSpawned& event) {
  if (event.gen == gen_.number) gen_.spawned_ms = clock_.monotonic_ms();
}

void Supervisor::launch_step_failed(const LaunchStepFailed& event) {
  if (event.gen != gen_.number) return;
  RootCause cause;
  cause.kind = FailureKind::agent_error;
  cause.host = event.host;
  cause.detail = event.step + " failed on " + event.host + ": " + event.detail;
  cause.observed_ms = clock_.wall_ms();
  handle_failure(cause, false);
}

}  // namespace dtrain::supervisor
