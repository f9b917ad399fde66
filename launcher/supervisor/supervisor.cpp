#include "launcher/supervisor/supervisor.h"

#include "launcher/supervisor/failure_blame.h"
#include "launcher/supervisor/recovery_decision.h"

#include "launcher/base/duration.h"
#include "launcher/events/events.h"

#include <algorithm>
#include <tuple>

namespace dtrain::supervisor {

namespace {

/// The cause as events name it: rank (with local_rank) only for a rank's failure, pid only for
/// a process that ran.
events::FailureCause event_cause(const RootCause& cause) {
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

}  // namespace

Supervisor::Supervisor(spec::JobSpec spec, plan::RankPlan initial_plan, const Clock& clock)
    : spec_(std::move(spec)), plan_(std::move(initial_plan)), clock_(clock) {}

std::vector<Action> Supervisor::on_event(const Event& event) {
  out_.clear();
  if (!is_terminal(state_)) std::visit([this](const auto& e) { on(e); }, event);
  return std::move(out_);
}

std::vector<Action> Supervisor::resume_from(const ResumeFrom& from) {
  out_.clear();
  generation_ = std::max(-1, from.last_generation);
  committed_steps_ = std::set<int64_t>(from.committed_steps.begin(), from.committed_steps.end());
  latest_checkpoint_step_ = committed_steps_.empty() ? -1 : *committed_steps_.rbegin();
  restarts_ = from.restarts;
  if (!from.supervisor_lost) return std::move(out_);

  RootCause cause;
  cause.kind = "supervisor.lost";
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

void Supervisor::set_state(RunState next, const std::string& why) {
  if (next == state_) return;
  state_ = next;
  record(events::RunState{to_string(next), why}.to_json());
}

void Supervisor::add_incident(nlohmann::json incident) {
  // Each incident names its own generation: the summary lists them in order.
  if (generation_ >= 0 && !incident.contains("gen")) incident["gen"] = generation_;
  incidents_.push_back(std::move(incident));
}

void Supervisor::record(nlohmann::json event) {
  if (generation_ >= 0 && !event.contains("gen")) event["gen"] = generation_;
  out_.push_back(RecordEvent{std::move(event)});
}

RootCause Supervisor::rank_cause(std::string kind, int rank, std::string detail) const {
  // The one place a rank's root cause is filled: where it ran, its pid, observed now.
  const plan::RankSlot* where = slot(rank);
  RootCause cause;
  cause.kind = std::move(kind);
  cause.host = where ? where->host : "";
  cause.rank = rank;
  cause.local_rank = where ? where->local_rank : -1;
  cause.pid = rank >= 0 && rank < static_cast<int>(ranks_.size()) ? ranks_[static_cast<size_t>(rank)].pid : 0;
  cause.detail = std::move(detail);
  cause.observed_ms = clock_.wall_ms();
  return cause;
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
  for (const RankStatus& rank : ranks_) newest = std::max(newest, rank.step);
  return newest;
}

Millis Supervisor::progress_window() const {
  return spec_.elastic.progress_window.count() > 0 ? spec_.elastic.progress_window : 2 * spec_.heartbeat.hang_timeout;
}

bool Supervisor::generation_made_progress() {
  // Steps: any rank of this generation reported one (a worker of the protocol, or instrumented).
  bool steps_known = std::any_of(ranks_.begin(), ranks_.end(), [](const RankStatus& r) { return r.step >= 0; });
  steps_reported_ = steps_known;
  if (steps_known && newest_step() > generation_start_step_) return true;
  if (latest_checkpoint_step_ > generation_start_checkpoint_) return true;
  if (steps_known) return false;
  // Neither can be known (a script that does not speak the worker protocol and wrote no
  // checkpoint through it): a generation that ran long enough is taken to have trained.
  int64_t ended = recovery_ && recovery_->detected_ms > 0 ? recovery_->detected_ms : clock_.monotonic_ms();
  return ended - generation_started_ms_ >= progress_window().count();
}

void Supervisor::start_generation(plan::RankPlan next_plan) {
  ++generation_;
  plan_ = std::move(next_plan);
  ranks_.assign(plan_.ranks.size(), RankStatus{});
  for (RankStatus& rank : ranks_) rank.state = RankState::starting;
  started_count_ = 0;
  comm_ready_count_ = 0;
  hang_exemption_recorded_ = false;
  unwatched_ranks_.clear();
  save_ended_ms_ = 0;
  generation_started_ms_ = clock_.monotonic_ms();
  generation_spawned_ms_ = 0;
  ending_ = Ending::none;
  int64_t resume_step = generation_ == 0 ? -1 : latest_checkpoint_step_;
  generation_start_step_ = resume_step;
  generation_start_checkpoint_ = latest_checkpoint_step_;
  set_state(RunState::launching, generation_ == 0 ? "all hosts connected" : "recovery");
  std::vector<std::string> hosts;
  for (const plan::PlanHost& host : plan_.hosts) hosts.push_back(host.entry.name);
  record(events::PlanGeneration{generation_, plan_.world_size, plan_.data, plan_.tensor, plan_.pipeline,
                                plan_.grad_accum, resume_step, std::move(hosts)}
             .to_json());
  if (recovery_) {
    recovery_->resume_step = resume_step;
    recovery_->spawned_ms = clock_.monotonic_ms();
  }
  out_.push_back(StartGeneration{generation_, plan_, resume_step, restarts_});
}

void Supervisor::stop_generation(Ending ending, ExitCode exit_code, const std::string& decision) {
  in_place_.reset();
  ending_ = ending;
  ending_code_ = exit_code;
  std::string why = ending == Ending::succeed  ? "every worker exited 0"
                    : ending == Ending::stop   ? "stop requested"
                    : ending == Ending::recover ? "failure detected; restarting"
                                                : "failure detected; giving up";
  if (!decision.empty()) why += " (" + decision + ")";
  set_state(ending == Ending::recover ? RunState::recovering : RunState::stopping, why);
  std::vector<std::string> hosts = live_hosts();
  awaiting_release_ = std::set<std::string>(hosts.begin(), hosts.end());
  stop_sent_ms_ = clock_.monotonic_ms();
  stop_deadline_ms_ = stop_sent_ms_ + spec_.stop_grace.count() + spec_.heartbeat.timeout.count();
  if (recovery_) recovery_->stop_sent_ms = stop_sent_ms_;
  if (generation_ < 0 || hosts.empty()) {
    finish_stop();
    return;
  }
  out_.push_back(StopGeneration{generation_, spec_.stop_grace.count(), hosts});
}

void Supervisor::finish_stop() {
  awaiting_release_.clear();
  switch (ending_) {
    case Ending::succeed:
      set_state(RunState::succeeded, "every worker exited 0 and every host released");
      out_.push_back(FinishRun{RunState::succeeded, ExitCode::ok});
      return;
    case Ending::stop:
      set_state(RunState::stopped, "stop requested");
      out_.push_back(FinishRun{RunState::stopped, ExitCode::interrupted});
      return;
    case Ending::fail:
    case Ending::none:
      set_state(RunState::failed, give_up_reason_.empty() ? "failure could not be recovered" : give_up_reason_);
      out_.push_back(FinishRun{RunState::failed, ending_code_});
      return;
    case Ending::recover: break;
  }

  // Recovery: the old generation is gone everywhere; decide the next one.
  recovery_->released_ms = clock_.monotonic_ms();
  // Beats are rate-limited, so a committed checkpoint can be newer than the newest beat.
  recovery_->last_step = std::max({recovery_->last_step, newest_step(), latest_checkpoint_step_});
  if (generation_made_progress()) generations_without_progress_ = 0;
  else ++generations_without_progress_;
  int crash_loop_after = spec_.elastic.crash_loop_after;
  if (generations_without_progress_ >= crash_loop_after) {
    std::string detail = "no progress across " + std::to_string(generations_without_progress_) +
                         " consecutive generations (no step advanced, no checkpoint committed" +
                         (steps_reported_ ? "" : ", none ran " + format_duration(progress_window()) + " or longer") +
                         "; elastic.crash_loop_after " + std::to_string(crash_loop_after) + ")";
    record(events::FailureCrashLoop{generations_without_progress_, detail}.to_json());
    ending_ = Ending::fail;
    ending_code_ = ExitCode::crash_loop;
    give_up_reason_ = "crash loop: " + detail;
    set_state(RunState::failed, give_up_reason_);
    out_.push_back(FinishRun{RunState::failed, ExitCode::crash_loop});
    return;
  }
  std::vector<std::string> without(excluded_.begin(), excluded_.end());
  Result<plan::RankPlan> next = plan::make_plan(spec_, without);
  if (!next) {
    give_up_reason_ = next.error().message;
    record(events::FailureUnrecoverable{next.error().message}.to_json());
    set_state(RunState::failed, next.error().message);
    out_.push_back(FinishRun{RunState::failed, ExitCode::hosts_lost});
    return;
  }
  if (recovery_->membership_change) {
    record(events::PlanChanged{plan::diff_text(plan_, *next), without}.to_json());
  }
  start_generation(std::move(next).value());
}

void Supervisor::handle_failure(RootCause cause, bool host_lost) {
  // During an in-place recovery the failure that started it stays the root cause: what fails
  // meanwhile (a survivor that cannot rejoin) follows from it.
  if (!in_place_ && (!root_cause_ || state_ == RunState::running || state_ == RunState::launching)) {
    root_cause_ = cause;
  }
  int64_t now_wall = clock_.wall_ms();
  std::optional<int64_t> latency_ms;
  if (cause.observed_ms > 0) latency_ms = std::max<int64_t>(0, now_wall - cause.observed_ms);
  nlohmann::json detected = events::FailureDetected{event_cause(cause), latency_ms, std::nullopt}.to_json();
  add_incident(detected);
  record(detected);

  // A failure while an in-place recovery is under way ends that attempt. A rank's (a survivor
  // that cannot rejoin: a script that does not support it, a shard without a live replica) is a
  // consequence: the same recovery goes on as a restart of every worker, with no second restart
  // counted. A lost host is news: the decision below handles it (replace, shrink or give up) as
  // it would have without elastic.in_place.
  std::optional<std::string> in_place_failed;
  if (in_place_) {
    in_place_failed = cause.rank >= 0 ? "rank " + std::to_string(cause.rank) +
                                            (cause.host.empty() ? "" : " on " + cause.host) + ": " + cause.kind +
                                            " (" + cause.detail + ")"
                                      : cause.kind + " " + cause.host + " (" + cause.detail + ")";
    if (!host_lost) {
      fall_back_from_in_place(*in_place_failed);
      return;
    }
    record(events::RecoveryFallback{generation_, *in_place_failed}.to_json());
    in_place_.reset();
  }

  // Facts for the policy's one decision (recovery_decision.h); the rest is carrying it out.
  FailureFacts facts{cause.host, host_lost, 0, plan_.world_size};
  if (!host_lost && !cause.host.empty()) facts.host_failures = ++host_failures_[cause.host];
  facts.single_rank = !host_lost && cause.rank >= 0 &&
                      (cause.kind == "worker.exit" || cause.kind == "worker.hang" || cause.kind == "worker.protocol");
  facts.plan = &plan_;
  facts.rank = cause.rank;
  int64_t now = clock_.monotonic_ms();
  int64_t window = spec_.elastic.restart_window.count();
  std::erase_if(failure_times_ms_, [&](int64_t t) { return window > 0 && now - t > window; });
  FailureHistory history{excluded_, static_cast<int>(failure_times_ms_.size())};
  history.in_place_failed = in_place_failed.has_value();
  RecoveryDecision decision = decide_recovery(facts, history, spec_);

  if (decision.exclude_host) {
    excluded_.insert(cause.host);
    if (!host_lost) {
      record(events::HostExcluded{{cause.host, facts.host_failures, decision.why}}.to_json());
    }
  }
  if (decision.exclusion_refused && exclusion_refused_.insert(cause.host).second) {
    record(events::HostExclusionSkipped{{cause.host, facts.host_failures, decision.why}}.to_json());
  }
  bool membership_change = decision.action == RecoveryAction::replace || decision.action == RecoveryAction::shrink;
  if (decision.action == RecoveryAction::give_up) {
    give_up_reason_ = decision.why;
    if (decision.exit_code == ExitCode::hosts_lost) {
      record(events::FailureUnrecoverable{decision.why}.to_json());
    } else {
      record(events::FailureBudgetExhausted{spec_.elastic.max_restarts, spec_.elastic.restart_window.count(),
                                            decision.why}
                 .to_json());
    }
    stop_generation(Ending::fail, decision.exit_code, decision.why);
    return;
  }
  // A lost host's spare is a membership change, in place or not: it uses no restart.
  if (decision.action == RecoveryAction::restart || (decision.action == RecoveryAction::in_place && !host_lost)) {
    failure_times_ms_.push_back(now);
    ++restarts_;
  }
  PendingRecovery pending;
  pending.cause = cause;
  pending.detected_ms = clock_.monotonic_ms();
  pending.last_step = newest_step();
  pending.membership_change = membership_change;
  pending.action = to_string(decision.action);
  pending.fallback = in_place_failed;
  recovery_ = pending;
  record(events::RecoveryStarted{event_cause(cause), restarts_, to_string(decision.action), decision.why}.to_json());
  if (decision.action != RecoveryAction::in_place) {
    stop_generation(Ending::recover, ExitCode::job_failed, decision.why);
    return;
  }
  start_in_place(cause, host_lost, decision, now);
}

// ---- events ---------------------------------------------------------------------------------

void Supervisor::on(const HostConnected& event) {
  connected_.insert(event.host);
  start_when_all_connected();
}

void Supervisor::start_when_all_connected() {
  if (state_ != RunState::connecting) return;
  for (const plan::PlanHost& host : plan_.hosts) {
    if (!connected_.count(host.entry.name)) return;
  }
  start_generation(plan_);
}

void Supervisor::on(const HostLost& event) {
  bool was_connected = connected_.erase(event.host) > 0;
  bool in_plan = std::any_of(plan_.hosts.begin(), plan_.hosts.end(),
                             [&](const plan::PlanHost& h) { return h.entry.name == event.host; });
  std::optional<int64_t> silent_ms;
  if (event.silent_ms >= 0) silent_ms = event.silent_ms;
  record(events::HostLost{event.host, event.reason, was_connected, silent_ms}.to_json());
  if (!in_plan) return;  // a spare we did not need

  RootCause cause;
  cause.kind = "host.lost";
  cause.host = event.host;
  cause.detail = event.reason;
  // Silence began when the host was last heard from: that is when the failure was observable.
  cause.observed_ms = clock_.wall_ms() - std::max<int64_t>(0, event.silent_ms);

  switch (state_) {
    case RunState::connecting: {
      excluded_.insert(event.host);
      std::vector<std::string> without(excluded_.begin(), excluded_.end());
      Result<plan::RankPlan> next = spec_.elastic.min_hosts > 0
                                        ? plan::make_plan(spec_, without)
                                        : Result<plan::RankPlan>(Error::user(
                                              "cannot start without " + event.host +
                                              " (set elastic.min_hosts to start with fewer hosts)"));
      if (next) {
        record(events::PlanChanged{plan::diff_text(plan_, *next), without}.to_json());
        plan_ = std::move(next).value();
        start_when_all_connected();
        return;
      }
      root_cause_ = cause;
      give_up_reason_ = next.error().message;
      add_incident(event_cause(cause).to_json());
      record(events::FailureDetected{{"host.lost", event.host, event.reason}, std::nullopt, std::nullopt}.to_json());
      stop_generation(Ending::fail, ExitCode::infra);
      return;
    }
    case RunState::launching:
    case RunState::running:
      handle_failure(cause, true);
      return;
    case RunState::recovering:
      if (in_place_) {  // waiting for a hung rank's exit: nothing is being stopped yet
        handle_failure(cause, true);
        return;
      }
      excluded_.insert(event.host);
      if (recovery_) recovery_->membership_change = true;
      [[fallthrough]];
    case RunState::stopping:
      awaiting_release_.erase(event.host);
      if (awaiting_release_.empty()) finish_stop();
      return;
    default:
      return;
  }
}

void Supervisor::on(const WorkerStarted& event) {
  if (event.gen != generation_ || !slot(event.rank)) return;
  RankStatus& rank = ranks_[static_cast<size_t>(event.rank)];
  rank.pid = event.pid;
  if (rank.state == RankState::starting) {
    rank.state = RankState::running;
    ++started_count_;
  }
  const plan::RankSlot* where = slot(event.rank);
  record(events::WorkerStarted{event.rank, where->host, where->local_rank, event.pid}.to_json());
  if (state_ == RunState::launching && started_count_ == static_cast<int>(ranks_.size())) {
    if (recovery_) recovery_->started_ms = clock_.monotonic_ms();
    set_state(RunState::running, "every worker started");
  }
}

void Supervisor::on(const WorkerSpawnFailed& event) {
  if (event.gen != generation_ || !slot(event.rank)) return;
  ranks_[static_cast<size_t>(event.rank)].state = RankState::failed;
  RootCause cause = rank_cause("worker.spawn", event.rank, event.error);
  cause.pid = 0;  // it never ran
  if (state_ == RunState::launching || state_ == RunState::running) {
    // A command that cannot start will not start next time either: give up at once.
    root_cause_ = cause;
    nlohmann::json detected = events::FailureDetected{event_cause(cause), std::nullopt, std::nullopt}.to_json();
    add_incident(detected);
    record(detected);
    stop_generation(Ending::fail, ExitCode::job_failed);
  }
}

void Supervisor::on(const WorkerExited& event) {
  if (event.gen != generation_ || !slot(event.rank)) return;
  RankStatus& rank = ranks_[static_cast<size_t>(event.rank)];
  if (in_place_ && in_place_->awaiting_exit && event.rank == in_place_->rank) {
    rank.state = RankState::killed;
    in_place_->awaiting_exit = false;
    in_place_->killed_ms = clock_.monotonic_ms();
    continue_in_place();
    return;
  }
  rank.exit_code = event.code;
  rank.exit_signal = event.signal;
  bool clean = event.code && *event.code == 0 && !event.signal;
  bool during_stop = state_ == RunState::stopping || state_ == RunState::recovering;
  rank.state = clean ? RankState::exited : during_stop ? RankState::killed : RankState::failed;

  if (clean) {
    bool all_clean = std::all_of(ranks_.begin(), ranks_.end(),
                                 [](const RankStatus& r) { return r.state == RankState::exited; });
    if (all_clean && (state_ == RunState::running || state_ == RunState::launching)) {
      stop_generation(Ending::succeed, ExitCode::ok);
    }
    return;
  }

  RootCause cause = rank_cause("worker.exit", event.rank,
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

  if (state_ == RunState::running || state_ == RunState::launching) {
    handle_failure(cause, false);
    return;
  }
  // Exits after we decided to stop are consequences — unless the agent saw this one before we
  // sent the stop and earlier than the failure we blamed: then it is the real root cause. One
  // that the agent killed (for our stop) is a consequence whatever its time stamp says.
  int64_t stop_sent_wall = clock_.wall_ms() - (clock_.monotonic_ms() - stop_sent_ms_);
  int64_t latest_possible = event.observed_ms + std::max<int64_t>(0, event.observed_uncertainty_ms);
  if (during_stop && !event.killed_by_agent && root_cause_ && event.observed_ms > 0 && latest_possible < stop_sent_wall &&
      latest_possible < root_cause_->observed_ms && root_cause_->kind == "worker.exit") {
    root_cause_ = cause;
    if (recovery_) recovery_->cause = cause;
    record(events::FailureRootCause{cause.rank, cause.host,
                                    "rank " + std::to_string(cause.rank) + " failed earlier (" + cause.detail +
                                        ") than the failure first reported"}
               .to_json());
    return;
  }
  // A rank that blamed a lost peer was blamed first; this one exited on its own (a status, not
  // our signal) with words of its own: it is the peer that went first.
  if (during_stop && !in_place_ && root_cause_ && root_cause_->kind == "worker.exit" &&
      root_cause_->reads_as_lost_peer && !cause.reads_as_lost_peer && !event.signal) {
    std::string blamed_first = "rank " + std::to_string(root_cause_->rank);
    root_cause_ = cause;
    if (recovery_) recovery_->cause = cause;
    record(events::FailureRootCause{cause.rank, cause.host,
                                    "rank " + std::to_string(cause.rank) + " failed on its own (" + cause.detail +
                                        "); " + blamed_first + ", reported first, names a lost peer"}
               .to_json());
  }
}

void Supervisor::on(const WorkerMisbehaved& event) {
  if (event.gen != generation_ || !slot(event.rank)) return;
  if (state_ != RunState::running && state_ != RunState::launching) return;  // already stopping
  ranks_[static_cast<size_t>(event.rank)].state = RankState::failed;
  handle_failure(rank_cause("worker.protocol", event.rank, event.detail), false);
}

void Supervisor::on(const WorkerProgress& event) {
  if (event.gen != generation_ || !slot(event.rank)) return;
  RankStatus& rank = ranks_[static_cast<size_t>(event.rank)];
  int64_t now = clock_.monotonic_ms();
  if (event.step != rank.step) {
    rank.step = event.step;
    rank.step_changed_ms = now;
  }
  if (event.in_checkpoint && *event.in_checkpoint != rank.in_checkpoint) {
    rank.in_checkpoint = *event.in_checkpoint;
    rank.phase_changed_ms = now;
    if (!rank.in_checkpoint) save_ended_ms_ = now;
  }
  if (!recovery_ || !recovery_->started_ms) return;
  if (event.step <= recovery_->resume_step) return;
  // In place, a survivor's first beats of the new generation may still be its old step (a line
  // in flight when its agent carried it over): only a beat after every communicator is up again
  // is a step of the new generation.
  if (in_place_ && !recovery_->comm_ready_ms) return;
  complete_recovery(event.step);
}

void Supervisor::complete_recovery(int64_t step) {
  // First step of the new generation: the recovery is complete.
  int64_t now = clock_.monotonic_ms();
  if (in_place_) recovery_->resume_step = step - 1;  // the survivors' newest completed step
  const PendingRecovery& r = *recovery_;
  int64_t resume_from = std::max<int64_t>(r.resume_step, 0);
  nlohmann::json phases = {
      {"detect_ms", r.cause.observed_ms > 0
                        ? std::max<int64_t>(0, clock_.wall_ms() - (now - r.detected_ms) - r.cause.observed_ms)
                        : 0}};
  if (in_place_) {
    add_in_place_phases(phases, now);
  } else {
    phases["stop_ms"] = r.released_ms - r.stop_sent_ms;
    phases["replan_ms"] = r.spawned_ms - r.released_ms;
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
  last_recovery_ = events::RecoveryCompleted{r.cause.kind,
                                             event_cause(r.cause),
                                             std::move(phases),
                                             r.resume_step,
                                             r.last_step,
                                             std::max<int64_t>(0, r.last_step - resume_from),
                                             plan_.world_size,
                                             restarts_,
                                             r.action.empty() ? "restart" : r.action,
                                             r.fallback}
                       .to_json();
  record(last_recovery_);
  last_recovery_["gen"] = generation_;
  recovery_.reset();
  in_place_.reset();
}

void Supervisor::on(const WorkerCommReady& event) {
  if (event.gen != generation_ || !slot(event.rank)) return;
  RankStatus& rank = ranks_[static_cast<size_t>(event.rank)];
  if (rank.comm_ready) return;
  rank.comm_ready = true;
  if (++comm_ready_count_ != static_cast<int>(ranks_.size())) return;
  int64_t now = clock_.monotonic_ms();
  record(events::CommReady{comm_ready_count_, now - generation_started_ms_}.to_json());
  if (recovery_) recovery_->comm_ready_ms = now;
}

void Supervisor::on(const CheckpointCommitted& event) {
  if (event.gen != generation_) return;
  committed_steps_.insert(event.step);
  latest_checkpoint_step_ = std::max(latest_checkpoint_step_, event.step);
}

void Supervisor::on(const CheckpointRejected& event) {
  // Workers fall back to the newest older step that verifies; follow them so that the next
  // resume and this recovery's resume_step/steps_lost tell the truth.
  committed_steps_.erase(event.step);
  latest_checkpoint_step_ = committed_steps_.empty() ? -1 : *committed_steps_.rbegin();
  if (recovery_ && recovery_->resume_step == event.step && event.gen == generation_) {
    auto older = committed_steps_.lower_bound(event.step);
    recovery_->resume_step = older == committed_steps_.begin() ? -1 : *std::prev(older);
    generation_start_step_ = recovery_->resume_step;
  }
}

void Supervisor::on(const WorkerStoppedSeen& event) {
  if (event.gen != generation_ || !slot(event.rank)) return;
  ranks_[static_cast<size_t>(event.rank)].seen_stopped = true;
}

void Supervisor::on(const GenerationReleased& event) {
  if (event.gen != generation_ && event.gen != -1) return;
  // In place, nothing is being stopped: survivors that are gone show at their carry-over.
  if (in_place_) return;
  awaiting_release_.erase(event.host);
  if (awaiting_release_.empty() &&
      (state_ == RunState::stopping || state_ == RunState::recovering)) {
    finish_stop();
  }
}

void Supervisor::on(const StopRequested& event) {
  if (state_ == RunState::stopping) return;  // already ending; keep the original outcome
  record(events::RunStopRequested{event.reason}.to_json());
  if (state_ == RunState::recovering) {
    ending_ = Ending::stop;
    ending_code_ = ExitCode::interrupted;
    set_state(RunState::stopping, event.reason + " during recovery");
    if (awaiting_release_.empty()) finish_stop();
    return;
  }
  stop_generation(Ending::stop, ExitCode::interrupted);
}

void Supervisor::on(const Tick&) {
  int64_t now = clock_.monotonic_ms();
  if (in_place_past_deadline(now)) return;
  if ((state_ == RunState::stopping || state_ == RunState::recovering) &&
      !awaiting_release_.empty() && now > stop_deadline_ms_) {
    std::vector<std::string> silent(awaiting_release_.begin(), awaiting_release_.end());
    record(events::ResourcesUnconfirmed{silent, "no release confirmation within stop_grace + heartbeat.timeout"}
               .to_json());
    if (state_ == RunState::recovering) {
      excluded_.insert(silent.begin(), silent.end());
      if (recovery_) recovery_->membership_change = true;
    }
    finish_stop();
    return;
  }
  if (state_ == RunState::launching) {
    check_launch_deadline(now);
    return;
  }
  if (state_ != RunState::running) return;
  int64_t hang_timeout = spec_.heartbeat.hang_timeout.count();
  // Workers that never speak the worker protocol have no step to watch: say so once, so that an
  // operator does not rely on hang detection that cannot happen.
  if (!hang_exemption_recorded_ && now - generation_started_ms_ > hang_timeout) {
    hang_exemption_recorded_ = true;
    std::vector<int> silent;
    for (size_t i = 0; i < ranks_.size(); ++i) {
      if (ranks_[i].state == RankState::running && ranks_[i].step < 0) silent.push_back(static_cast<int>(i));
    }
    if (!silent.empty()) {
      unwatched_ranks_.insert(unwatched_ranks_.end(), silent.begin(), silent.end());
      record(events::HangDetectionOff{
          silent, "no heartbeat with a step from these ranks within heartbeat.hang_timeout (they do not "
                  "speak the worker protocol, or have not made a step yet: a slow import, a long data "
                  "load): until they do, they are not watched for hangs; exits and host loss are "
                  "still detected"}
                 .to_json());
    }
  }
  // Ranks named there that have beaten since are watched now: say so, once, for all of them.
  if (!unwatched_ranks_.empty()) {
    std::vector<int> watched;
    std::erase_if(unwatched_ranks_, [&](int rank) {
      bool beating = slot(rank) && ranks_[static_cast<size_t>(rank)].step >= 0;
      if (beating) watched.push_back(rank);
      return beating;
    });
    if (!watched.empty()) {
      record(events::HangDetectionOn{watched, now - generation_started_ms_,
                                     "these ranks beat with a step now: they are watched for hangs from here on"}
                 .to_json());
    }
  }
  // When one rank stalls, its peers soon block in the next collective and stall too. Blame a
  // rank the agent saw stopped first; then the one that stalled first — lowest step, then the
  // oldest step change (beats are rate-limited, so steps alone can mislead).
  // A rank in a checkpoint save holds its peers the same way: while one saves, only the saver is
  // watched, with heartbeat.checkpoint_timeout, and when a save ends every rank's clock restarts.
  // A saver seen stopped (SIGSTOP, a debugger) is not saving: it gets hang_timeout.
  int64_t checkpoint_timeout = spec_.heartbeat.checkpoint_hang_timeout().count();
  auto saving = [](const RankStatus& r) { return r.in_checkpoint && !r.seen_stopped; };
  bool any_saving = std::any_of(ranks_.begin(), ranks_.end(), [&](const RankStatus& r) {
    return r.state == RankState::running && saving(r);
  });
  auto quiet_since = [&](const RankStatus& r) {
    return std::max({r.step_changed_ms, r.phase_changed_ms, save_ended_ms_});
  };
  // Once one rank is past its limit, the blame goes to the most suspicious rank among those
  // silent almost as long: beats are rate-limited, so the rank that stopped may have beaten a
  // moment after a peer that it then blocked, and crosses the limit a tick later.
  auto limit_of = [&](const RankStatus& r) { return saving(r) ? checkpoint_timeout : hang_timeout; };
  auto watched = [&](const RankStatus& r) {
    return r.state == RankState::running && r.step >= 0 && (!any_saving || saving(r));
  };
  int64_t most_overdue_ms = 0;  // how long ago the first rank went past its limit
  for (const RankStatus& r : ranks_) {
    if (watched(r)) most_overdue_ms = std::max(most_overdue_ms, now - quiet_since(r) - limit_of(r));
  }
  bool any_past = most_overdue_ms > 0;
  int64_t slack = 2 * spec_.heartbeat.interval.count();
  std::optional<size_t> hung;
  for (size_t i = 0; i < ranks_.size() && any_past; ++i) {
    const RankStatus& rank = ranks_[i];
    if (!watched(rank) || now - quiet_since(rank) <= limit_of(rank) - slack) continue;
    auto suspicion = [&](const RankStatus& r) {
      return std::make_tuple(!r.seen_stopped, r.step, quiet_since(r));
    };
    if (!hung || suspicion(rank) < suspicion(ranks_[*hung])) {
      hung = i;
    }
  }
  if (hung) {
    size_t i = *hung;
    RankStatus& rank = ranks_[i];
    const plan::RankSlot& where = plan_.ranks[i];
    bool in_save = saving(rank);
    int64_t silent_ms = now - quiet_since(rank);
    int64_t limit = limit_of(rank);
    record(events::WorkerHang{static_cast<int>(i), where.host, rank.pid, rank.step, in_save ? "checkpoint" : "train",
                              silent_ms}
               .to_json());
    out_.push_back(CaptureSample{generation_, static_cast<int>(i), where.host, rank.pid});
    std::string detail = in_save ? "checkpoint save at step " + std::to_string(rank.step) + " still running after " +
                                       std::to_string(silent_ms / 1000) + "s (heartbeat.checkpoint_timeout " +
                                       format_duration(Millis(limit)) + ")"
                                 : "no step progress for " + std::to_string(silent_ms / 1000) + "s at step " +
                                       std::to_string(rank.step);
    RootCause cause = rank_cause("worker.hang", static_cast<int>(i), detail);
    cause.observed_ms = clock_.wall_ms() - most_overdue_ms;
    handle_failure(cause, false);
    return;
  }
}

// ---- launch deadlines -------------------------------------------------------------------------

Millis Supervisor::launch_deadline() const {
  // A live agent answers a port reservation and reports `started` within moments of the
  // request (fork + exec); one that is silent longer than heartbeat.timeout would be lost
  // anyway. Twice that leaves room for a loaded host without letting a launch hang for ever.
  return 2 * spec_.heartbeat.timeout;
}

void Supervisor::on(const GenerationSpawned& event) {
  if (event.gen != generation_ || state_ != RunState::launching) return;
  generation_spawned_ms_ = clock_.monotonic_ms();
}

void Supervisor::on(const LaunchStepFailed& event) {
  if (event.gen != generation_ || state_ != RunState::launching) return;
  RootCause cause;
  cause.kind = "agent.error";
  cause.host = event.host;
  cause.detail = event.step + " failed on " + event.host + ": " + event.detail;
  cause.observed_ms = clock_.wall_ms();
  handle_failure(cause, false);
}

void Supervisor::check_launch_deadline(int64_t now) {
  int64_t deadline = launch_deadline().count();
  std::string limit = format_duration(launch_deadline()) + " (2 × heartbeat.timeout)";
  RootCause cause;
  cause.kind = "launch.timeout";
  if (generation_spawned_ms_ == 0) {
    if (now - generation_started_ms_ <= deadline) return;
    // Nothing was spawned: rank 0's host never answered the port reservation.
    cause.host = plan_.ranks.empty() ? "" : plan_.ranks.front().host;
    cause.detail = "port reservation: no reply from " + cause.host + " within " + limit +
                   "; generation " + std::to_string(generation_) + " was not spawned";
    cause.observed_ms = clock_.wall_ms() - (now - generation_started_ms_ - deadline);
  } else {
    if (now - generation_spawned_ms_ <= deadline) return;
    // Blame the first host (in plan order) with a rank that never reported `started`.
    std::vector<int> missing;
    for (size_t i = 0; i < ranks_.size(); ++i) {
      if (ranks_[i].state != RankState::starting) continue;
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
    cause.observed_ms = clock_.wall_ms() - (now - generation_spawned_ms_ - deadline);
  }
  handle_failure(cause, false);
}

}  // namespace dtrain::supervisor
