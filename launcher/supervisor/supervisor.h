#pragma once
// The supervisor: the whole recovery policy of docs/architecture.md §4 as a pure state machine.
// `on_event(Event) → Actions`, with the clock injected; no sockets, threads or sleeps. The
// driver (launcher/run) turns transport traffic into Events and carries out the Actions.
//
// It is a state × event table: Supervisor::Phase are the states, the Event variant's types the
// events, and supervisor_table.cpp the table, one row per event naming the handler of each
// state; on_event looks the cell up and calls it, and there is no other dispatch. Every change
// of the reported RunState is also a `run.state` event in events.jsonl. The policy's decisions
// are pure functions beside decide_recovery (recovery_decision.h); hang detection is
// HangDetector (hang_detector.h), with the timeouts in force from HangTimeouts (hang_timeouts.h);
// a generation is one Generation value (generation.h).
//
// A failure is a worker exiting non-zero or by signal, a worker that cannot be spawned, a hung
// worker (its step unchanged for heartbeat.hang_timeout), or a lost host. Failures count against
// elastic.max_restarts within elastic.restart_window; a lost host is excluded and the plan is
// rebuilt without it (spare or shrink, if elastic.min_hosts allows) — membership changes do not
// use the budget. elastic.crash_loop_after consecutive generations without step progress end the
// run as a crash loop. Every launch step has a deadline, launch_deadline() (2 × heartbeat.timeout):
// rank 0's port reply, then every worker's `started`; one missed is a failure of kind
// launch.timeout naming the host and the step. With elastic.in_place, a single rank's failure
// (or a lost host whose ranks a spare takes) is repaired in place: the other workers keep
// running, carried over to the next generation; past elastic.in_place_timeout, or when a survivor
// fails, the same recovery falls back to a restart of every worker.

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <variant>
#include <vector>

#include "launcher/base/clock.h"
#include "launcher/events/events.h"
#include "launcher/events/stack_comparison.h"
#include "launcher/spec/job_spec.h"
#include "launcher/supervisor/generation.h"
#include "launcher/supervisor/hang_timeouts.h"
#include "launcher/supervisor/recovery_decision.h"
#include "launcher/supervisor/supervisor_types.h"

namespace dtrain::events {
struct FailureCause;
}

namespace dtrain::supervisor {

class Supervisor {
 public:
  /// `initial_plan` is make_plan(spec); `clock` must outlive the supervisor.
  Supervisor(spec::JobSpec spec, plan::RankPlan initial_plan, const Clock& clock);

  /// Feeds one event; returns what the driver must do, in order.
  std::vector<Action> on_event(const Event& event);

  /// Continues a run whose supervisor died (`dtrain resume`); call before the first event.
  /// Generations go on from `from.last_generation` + 1, workers resume from the newest
  /// committed checkpoint, and the first step of the new generation completes a recovery of
  /// kind "supervisor.lost" (detect = old supervisor's last sign of life → resume; stop = the
  /// wait for the old agents to fence), recorded like any other.
  std::vector<Action> resume_from(const ResumeFrom& from);

  /// The states of the table: RunState as reported, with in-place replacement's three steps
  /// as states of their own (reported as recovering, launching and running).
  enum class Phase {
    connecting,          ///< RunState::connecting
    launching,           ///< RunState::launching
    running,             ///< RunState::running
    in_place_killing,    ///< in place: a hung or misbehaving rank killed alone, its exit awaited, and the
                         ///< health of the hosts the recovery takes in or keeps (recovering)
    in_place_launching,  ///< in place: survivors carried over, the replacement starting (launching)
    in_place_running,    ///< in place: every worker there, the first step awaited (running)
    recovering,          ///< RunState::recovering: the failed generation stopping for a restart
    stopping,            ///< RunState::stopping
    succeeded,           ///< terminal; so are the two below
    failed,
    stopped,
    preempted
  };
  /// The table has a column for each phase before `succeeded`: nothing happens after the end.
  static constexpr size_t kTablePhases = static_cast<size_t>(Phase::succeeded);

  Phase phase() const { return phase_; }
  RunState state() const { return reported(phase_); }
  int generation() const { return gen_.number; }
  const plan::RankPlan& current_plan() const { return plan_; }
  const std::vector<RankStatus>& ranks() const { return gen_.ranks; }
  const std::optional<RootCause>& root_cause() const { return root_cause_; }
  int restarts() const { return restarts_; }
  /// Why the run was asked to stop (StopRequested::reason); empty when it was not.
  const std::string& stop_reason() const { return stop_reason_; }
  /// The newest checkpoint committed by every rank and not found damaged; -1: none.
  int64_t latest_checkpoint_step() const { return latest_checkpoint_step_; }
  const std::set<std::string>& excluded_hosts() const { return excluded_; }
  /// The newest recovery that completed, with the generation it started (state.json's
  /// last_recovery); none before the first.
  struct CompletedRecovery {
    int gen = 0;
    events::RecoveryCompleted completed{};
  };
  const std::optional<CompletedRecovery>& last_recovery() const { return last_recovery_; }
  /// Why the run could not go on, when the policy gave up (fewer hosts than elastic.min_hosts,
  /// restart budget spent); "" otherwise. The root cause says what failed; this says why it
  /// ended the run.
  const std::string& give_up_reason() const { return give_up_reason_; }
  /// Every failure.detected event so far (the end-of-run incident list).
  const std::vector<nlohmann::json>& incidents() const { return incidents_; }
  /// The hang timeouts in force (state.json's hang_timeout).
  const HangTimeouts& hang_timeouts() const { return hang_timeouts_; }
  /// Every stack.consistency recorded: the hosts compared before the first generation, then
  /// each spare left out for its stack (state.json's stack).
  const std::vector<events::StackConsistency>& stack_verdicts() const { return stack_verdicts_; }
  /// Each host's newest health checks, as recorded in host.health (state.json's health).
  const std::map<std::string, events::HostHealth>& host_health() const { return host_health_; }
  /// The hosts this run quarantined (host.quarantined), in the order it did.
  const std::vector<std::string>& quarantined_hosts() const { return quarantined_; }

 private:
  struct PendingRecovery {
    RootCause cause;
    int64_t detected_ms = 0;      ///< monotonic
    int64_t stop_sent_ms = 0;
    int64_t released_ms = 0;
    int64_t spawned_ms = 0;
    int64_t started_ms = 0;
    int64_t comm_ready_ms = 0;    ///< every rank's communicator up; 0: not (yet) reported
    /// A step past resume_step seen before every rank's comm.ready arrived (frames of different
    /// hosts come through different links, in any order): the recovery completes, at this
    /// time, when the last comm.ready does. 0: none seen.
    int64_t first_step_seen_ms = 0;
    int64_t first_step = -1;
    int64_t last_step = -1;       ///< newest step reached by the failed generation
    int64_t resume_step = -1;
    bool membership_change = false;
    std::string action;                  ///< recovery.started's action: "restart", "in-place", ...
    std::optional<std::string> fallback; ///< why an in-place attempt gave way to a restart
    /// The next generation's plan as decided (decide_recovery, or replan_without when hosts
    /// were excluded while the failed generation stopped); unset: none, `no_plan` says why.
    std::optional<plan::RankPlan> next_plan;
    std::string no_plan;
    /// Health gate (supervisor_health.cpp): the hosts asked to check themselves before the
    /// next generation takes them in, and how long that took (recovery.completed's health_ms).
    std::set<std::string> health_checked;
    int64_t health_asked_ms = 0;
    int64_t health_ms = 0;
  };
  /// An in-place recovery under way (elastic.in_place), meaningful in the in_place_* phases only:
  /// generation `from_gen` continues as the next one without restarting its survivors.
  struct InPlace {
    int from_gen = 0;
    std::vector<int> replaced;        ///< ranks started anew (the failed one, or a lost host's)
    int rank = -1;                    ///< a hung rank killed first (single-rank failures), else -1
    int64_t decided_ms = 0;           ///< monotonic
    int64_t deadline_ms = 0;          ///< monotonic: past it, fall back to a full restart
    int64_t killed_ms = 0;            ///< the hung rank's exit seen (0: it had exited already)
    bool killed = false;              ///< the hung rank's exit seen (rank >= 0 only)
    int64_t continued_ms = 0;         ///< the survivors told to carry over (continue_in_place)
    /// Hosts whose health answer the attempt waits for before it starts any replacement: the spare
    /// that takes a lost host's ranks (join), the host blamed for the failure (after failure).
    std::set<std::string> awaiting_health;
    int64_t carried_ms = 0;           ///< every host carried its survivors over
    std::set<std::string> awaiting_carry;
  };
  /// How a stopping run ends.
  enum class Ending { succeed, fail, stop, preempt };

  // ---- the table (supervisor_table.cpp) ----
  template <class E>
  using Handler = void (Supervisor::*)(const E&);
  template <class E>
  using Row = std::array<Handler<E>, kTablePhases>;  ///< by phase; null: the event is ignored
  template <class V>
  struct RowsOf;
  template <class... E>
  struct RowsOf<std::variant<E...>> {
    using type = std::tuple<Row<E>...>;
  };
  using Table = RowsOf<Event>::type;
  static const Table& table();
  template <class E>
  void dispatch(const E& event);
  static RunState reported(Phase phase);

  // ---- the cells: one handler per distinct behaviour (supervisor_events.cpp) ----
  void connect_host(const HostConnected& event);
  void connect_host_and_start(const HostConnected& event);
  /// Records the loss (every phase does); true when the host is in the plan (not an unused spare).
  bool note_host_lost(const HostLost& event);
  void lose_host_before_start(const HostLost& event);
  /// The one plan (or the give-up) for every host in lost_while_connecting_; the last of them is
  /// the root cause when there is no plan.
  void decide_losses_while_connecting();
  void fail_lost_host(const HostLost& event);
  void lose_host_while_recovering(const HostLost& event);
  void lose_host_while_stopping(const HostLost& event);
  void note_started(const WorkerStarted& event);
  /// note_started, and `when_all_started` once every rank of the generation runs.
  void start_rank_then(const WorkerStarted& event, Phase when_all_started);
  void launch_started(const WorkerStarted& event);
  void replacement_started(const WorkerStarted& event);
  void give_up_on_spawn_failure(const WorkerSpawnFailed& event);
  void note_spawn_failed(const WorkerSpawnFailed& event);
  RootCause exit_cause(const WorkerExited& event) const;
  void worker_exited(const WorkerExited& event);
  void exit_while_killing(const WorkerExited& event);
  void exit_while_stopping(const WorkerExited& event);
  /// Updates the rank's step and phase; false when the beat is not of this generation.
  bool note_progress(const WorkerProgress& event);
  /// A beat of a generation that ran: the first step past the resume step completes a pending
  /// recovery (also when the run is stopping meanwhile: the step was made). Before every worker
  /// started, and while a failed generation stops for a restart, it is only noted: the pending
  /// recovery is the next generation's.
  void progress(const WorkerProgress& event);
  void note_beat(const WorkerProgress& event);
  void progress_in_place(const WorkerProgress& event);
  void comm_ready(const WorkerCommReady& event);
  void checkpoint_committed(const CheckpointCommitted& event);
  void checkpoint_rejected(const CheckpointRejected& event);
  void stopped_seen(const WorkerStoppedSeen& event);
  void misbehaved(const WorkerMisbehaved& event);
  void host_released(const GenerationReleased& event);
  void stop_run(const StopRequested& event);
  void stop_while_recovering(const StopRequested& event);
  void check_launch(const Tick& event);
  void watch_hangs(const Tick& event);
  void check_in_place(const Tick& event);
  void check_in_place_launch(const Tick& event);
  void check_in_place_hangs(const Tick& event);
  void check_release(const Tick& event);
  void check_connecting(const Tick& event);
  void generation_spawned(const GenerationSpawned& event);
  void launch_step_failed(const LaunchStepFailed& event);
  void survivors_carried_over(const SurvivorsCarriedOver& event);

  // ---- in-place recovery (supervisor_in_place.cpp) ----
  /// decide_recovery chose in place for `cause`: records the attempt and continues at once (a
  /// crash, a lost host's spare) or kills the hung rank alone first (KillRanks).
  void start_in_place(const RootCause& cause, bool host_lost, RecoveryDecision& decision, int64_t now);
  /// The failed rank's process is gone: carry the survivors over to the next generation and
  /// spawn its replacement (ContinueInPlace).
  void continue_in_place();
  /// continue_in_place once the hung rank (if any) has exited and every health answer is in.
  void continue_in_place_when_ready();
  /// The in-place recovery cannot finish: stop the generation and restart every worker from the
  /// newest checkpoint, as the same recovery (recovery.fallback says why).
  void fall_back_from_in_place(const std::string& why);
  /// Falls back when the attempt is past elastic.in_place_timeout; true when it did.
  bool in_place_past_deadline();
  /// recovery.completed's phases of an in-place recovery (detect is the caller's).
  void add_in_place_phases(nlohmann::json& phases, int64_t now) const;
  bool replacing() const;

  // ---- one software stack (supervisor_stack.cpp) ----
  /// Keeps the stack a host reported at hello; a spare that connects after the comparison is
  /// judged at once.
  void note_stack(const HostConnected& event);
  /// Before the first generation (spec consistency): compares the plan's hosts and judges the
  /// spares connected so far. False when the run must not start (strict, a host differs): the
  /// run is then stopping.
  bool stacks_allow_start();
  /// A spare whose stack differs from the compared hosts' majority is excluded (never planned).
  void judge_spare_stack(const std::string& host);

  // ---- health gates (supervisor_health.cpp) ----
  void health_at_connect(const HostConnected& event);
  /// Whether `host` is waiting for its first health checks since it connected (config.health).
  bool awaiting_start_health(const std::string& host) const;
  void health_before_start(const HostHealthReported& event);
  void health_while_recovering(const HostHealthReported& event);
  void health_later(const HostHealthReported& event);
  /// An in-place attempt's health answer: a failed host makes it fall back to a restart
  /// without that host; the last answer lets it continue.
  void health_in_place(const HostHealthReported& event);
  /// Records host.health with `action` and `detail`, keeps it for the views, and quarantines a
  /// host whose check failed. Returns the event as recorded.
  const events::HostHealth& note_health(events::HostHealth health, const std::string& action, const std::string& detail);
  void quarantine(const std::string& host, const std::string& reason, std::vector<std::string> evidence);
  /// A failure blamed on `host` at wall time `now`: quarantined once it is the root cause of
  /// health.quarantine.after failures within its window.
  void count_failure_for_quarantine(const RootCause& cause, int64_t now_wall_ms);
  /// Before the next generation: asks the hosts it takes in (spares, rejoined hosts: join) and
  /// the host blamed for the failure (after failure, with the site's diagnose) to check
  /// themselves; true while answers are awaited.
  bool health_gate_before_restart();
  /// Asks the hosts of `next` that the recovery takes in (not in `current`: join) and the host
  /// blamed for its failure when it stays (after failure) to check themselves, once per
  /// recovery; returns the hosts asked now.
  std::set<std::string> ask_health_of(const std::set<std::string>& current, const plan::RankPlan& next);
  /// The health answers awaited past their deadline are taken as unchecked (admitted, warned).
  void check_health_deadlines(int64_t now);
  Millis health_deadline(bool diagnose) const;

  // ---- the rest (supervisor.cpp) ----
  /// recovery.completed for the pending recovery, reached at `step` of the new generation.
  /// `at_ms`: when the first step was seen (monotonic); 0: now.
  void complete_recovery(int64_t step, bool in_place, int64_t at_ms = 0);
  /// Every rank of the recovered generation exited 0 before a beat completed the recovery (its
  /// steps after the recovery took less than a beat interval, or its beats were late): it
  /// trained to the end, so the recovery completed, by now at the latest. Without this the run
  /// log would hold a recovery.started that never ends.
  void complete_recovery_at_success();
  /// The cause as events name it.
  static events::FailureCause event_cause(const RootCause& cause);
  /// Fails the launching generation when a launch step is past launch_deadline().
  void check_launch_deadline(int64_t now);
  Millis launch_deadline() const;
  void start_when_all_connected();
  /// Enters `next`, recording a `run.state` event when the reported RunState changes.
  void set_phase(Phase next, const std::string& why);
  void record(nlohmann::json event);
  /// gen_ was just made: its hang watch starts with the timeouts in force (which warm up again).
  void watch_generation();
  /// Gives the hang watch the timeouts in force, recording hang_timeout.changed when they moved.
  void update_hang_timeouts();
  void start_generation(plan::RankPlan plan);
  /// Stops the generation to end the run as `ending`; `decision`: the why shown with the state.
  void stop_generation(Ending ending, ExitCode exit_code, const std::string& decision = "");
  /// Stops the generation to restart it (the recovering phase).
  void stop_to_recover(const std::string& decision);
  void send_stop();
  void finish_stop();
  /// Continues a recovery once every host released the failed generation.
  void finish_recovery();
  /// The recovery's next generation, once its hosts passed their health gate.
  void start_next_generation();
  /// A failure of the running generation: gathers the facts for decide_recovery() (restart,
  /// replace, shrink, in place or give up) and carries its decision out.
  void handle_failure(RootCause cause, bool host_lost);
  /// Hosts were excluded while the failed generation stopped: the decided plan is void.
  void replan_after_exclusion();
  void give_up(const RecoveryDecision& decision);
  int64_t newest_step() const;
  GenerationProgress progress_of_generation() const;
  void add_incident(nlohmann::json incident);
  /// A RootCause of `kind` for `rank` of this generation: its host, local rank and pid from the
  /// plan and its status, observed now (callers adjust pid, code, signal or time).
  RootCause rank_cause(events::FailureKind kind, int rank, std::string detail) const;
  /// The status of `rank` when `gen` is this generation's number and the rank is in it, else null.
  RankStatus* rank_of(int gen, int rank);
  std::vector<std::string> live_hosts() const;
  const plan::RankSlot* slot(int rank) const;

  spec::JobSpec spec_;
  plan::RankPlan plan_;
  const Clock& clock_;
  std::vector<Action> out_;

  Phase phase_ = Phase::connecting;
  Generation gen_;
  HangTimeouts hang_timeouts_;
  InPlace in_place_;
  Ending ending_ = Ending::fail;
  ExitCode ending_code_ = ExitCode::ok;
  std::set<std::string> connected_;
  std::set<std::string> excluded_;
  /// Hosts lost before the first generation whose exclusion no plan has taken in yet, in order.
  std::vector<HostLost> lost_while_connecting_;
  std::map<std::string, int> host_failures_;
  std::set<std::string> awaiting_release_;
  // Health (supervisor_health.cpp): by host, when its checks were asked (monotonic ms).
  std::map<std::string, int64_t> awaiting_health_;
  std::set<std::string> health_checked_hosts_;  ///< agents asked for checks (config.health)
  std::map<std::string, events::HostHealth> host_health_;
  std::vector<std::string> quarantined_;
  std::map<std::string, std::vector<std::pair<int64_t, std::string>>> failures_by_host_;  ///< wall ms, detail
  int64_t stop_sent_ms_ = 0;
  int64_t stop_grace_ms_ = 0;
  std::string stop_reason_;  ///< a preemption's grace for the workers; 0: spec stop_grace

  std::optional<RootCause> root_cause_;
  std::string give_up_reason_;
  std::optional<PendingRecovery> recovery_;
  std::optional<CompletedRecovery> last_recovery_;
  std::vector<nlohmann::json> incidents_;
  std::vector<int64_t> restart_times_ms_;  ///< monotonic, for restart_window
  int restarts_ = 0;
  int64_t latest_checkpoint_step_ = -1;
  std::set<int64_t> committed_steps_;  ///< minus the ones found damaged
  int generations_without_progress_ = 0;
  std::set<std::string> exclusion_refused_;  ///< hosts past exclude_after that no plan can spare
  std::map<std::string, events::HostStack> stacks_;  ///< by host, as reported at hello
  bool stacks_compared_ = false;
  events::StackComparison stack_reference_;  ///< the comparison before the first generation
  std::vector<events::StackConsistency> stack_verdicts_;
};

}  // namespace dtrain::supervisor
