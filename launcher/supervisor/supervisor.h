#pragma once
// The supervisor: the whole recovery policy of docs/architecture.md §4 as a pure state machine.
// `on_event(Event) → Actions`, with the clock injected; no sockets, threads or sleeps. The
// driver (launcher/run) turns transport traffic into Events and carries out the Actions.
//
// Transitions (every one is also a `run.state` event in events.jsonl):
//
//   connecting --all hosts connected-------------------------> launching (StartGeneration 0)
//   connecting --host lost-----------------------------------> stopping → failed (exit 3)
//   launching  --all workers started-------------------------> running
//   launching  --a launch step past its deadline or failed---> (a failure, as below)
//   launching/running --failure, budget left-----------------> recovering (StopGeneration)
//   launching/running --failure, no budget-------------------> stopping (StopGeneration) → failed
//   running    --every worker exited 0-----------------------> stopping (StopGeneration) → succeeded
//   recovering --all hosts released--------------------------> launching (StartGeneration g+1)
//   any        --stop requested------------------------------> stopping → stopped (exit 130)
//   stopping   --all hosts released (or stop deadline)-------> succeeded | failed | stopped
//
// A failure is a worker exiting non-zero or by signal, a worker that cannot be spawned, a hung
// worker (its step unchanged for heartbeat.hang_timeout), or a lost host. Failures count against
// elastic.max_restarts within elastic.restart_window; a lost host is excluded and the plan is
// rebuilt without it (spare or shrink, if elastic.min_hosts allows) — membership changes do not
// use the budget. Three consecutive generations without step progress end the run as a crash
// loop. Every launch step has a deadline, launch_deadline() (2 × heartbeat.timeout): rank 0's
// port reply, then every worker's `started`; one missed is a failure of kind launch.timeout
// naming the host and the step.

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "launcher/base/clock.h"
#include "launcher/spec/job_spec.h"
#include "launcher/supervisor/supervisor_types.h"

namespace dtrain::supervisor {

struct RecoveryDecision;

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

  RunState state() const { return state_; }
  int generation() const { return generation_; }
  const plan::RankPlan& current_plan() const { return plan_; }
  const std::vector<RankStatus>& ranks() const { return ranks_; }
  const std::optional<RootCause>& root_cause() const { return root_cause_; }
  int restarts() const { return restarts_; }
  const std::set<std::string>& excluded_hosts() const { return excluded_; }
  /// The last recovery.completed event, or null.
  const nlohmann::json& last_recovery() const { return last_recovery_; }
  /// Why the run could not go on, when the policy gave up (fewer hosts than elastic.min_hosts,
  /// restart budget spent); "" otherwise. The root cause says what failed; this says why it
  /// ended the run.
  const std::string& give_up_reason() const { return give_up_reason_; }
  /// Every failure.detected event so far (the end-of-run incident list).
  const std::vector<nlohmann::json>& incidents() const { return incidents_; }

 private:
  struct PendingRecovery {
    RootCause cause;
    int64_t detected_ms = 0;      ///< monotonic
    int64_t stop_sent_ms = 0;
    int64_t released_ms = 0;
    int64_t spawned_ms = 0;
    int64_t started_ms = 0;
    int64_t comm_ready_ms = 0;    ///< every rank's communicator up; 0: not (yet) reported
    int64_t last_step = -1;       ///< newest step reached by the failed generation
    int64_t resume_step = -1;
    bool membership_change = false;
    std::string action;                  ///< recovery.started's action: "restart", "in-place", ...
    std::optional<std::string> fallback; ///< why an in-place attempt gave way to a restart
  };
  /// An in-place recovery under way (elastic.in_place): generation `from_gen` continues as the
  /// next one without restarting its survivors.
  struct InPlace {
    int from_gen = 0;
    std::vector<int> replaced;        ///< ranks started anew (the failed one, or a lost host's)
    int rank = -1;                    ///< a hung rank killed first (single-rank failures), else -1
    bool awaiting_exit = false;       ///< a hung rank: killed, its exit not seen yet
    int64_t decided_ms = 0;           ///< monotonic
    int64_t deadline_ms = 0;          ///< monotonic: past it, fall back to a full restart
    int64_t killed_ms = 0;            ///< the hung rank's exit seen (0: it had exited already)
    int64_t carried_ms = 0;           ///< every host carried its survivors over
    std::set<std::string> awaiting_carry;
  };
  enum class Ending { none, succeed, fail, stop, recover };

  void on(const HostConnected& event);
  void on(const HostLost& event);
  void on(const WorkerStarted& event);
  void on(const WorkerSpawnFailed& event);
  void on(const WorkerExited& event);
  void on(const WorkerProgress& event);
  void on(const WorkerCommReady& event);
  void on(const CheckpointCommitted& event);
  void on(const CheckpointRejected& event);
  void on(const WorkerStoppedSeen& event);
  void on(const WorkerMisbehaved& event);
  void on(const GenerationReleased& event);
  void on(const StopRequested& event);
  void on(const Tick& event);
  void on(const GenerationSpawned& event);
  void on(const LaunchStepFailed& event);
  void on(const SurvivorsCarriedOver& event);
  // In-place recovery (supervisor_in_place.cpp).
  /// decide_recovery chose in place for `cause`: records the attempt and continues at once (a
  /// crash, a lost host's spare) or kills the hung rank alone first (KillRanks).
  void start_in_place(const RootCause& cause, bool host_lost, RecoveryDecision& decision, int64_t now);
  /// The failed rank's process is gone: carry the survivors over to the next generation and
  /// spawn its replacement (ContinueInPlace).
  void continue_in_place();
  /// The in-place recovery cannot finish: stop the generation and restart every worker from the
  /// newest checkpoint, as the same recovery (recovery.fallback says why).
  void fall_back_from_in_place(const std::string& why);
  Millis in_place_timeout() const;
  /// Falls back when the attempt is past elastic.in_place_timeout; true when it did.
  bool in_place_past_deadline(int64_t now);
  /// recovery.completed's phases of an in-place recovery (detect is the caller's).
  void add_in_place_phases(nlohmann::json& phases, int64_t now) const;
  /// recovery.completed for the pending recovery, reached at `step` of the new generation.
  void complete_recovery(int64_t step);
  /// Fails the launching generation when a launch step is past launch_deadline().
  void check_launch_deadline(int64_t now);
  Millis launch_deadline() const;

  void start_when_all_connected();
  void set_state(RunState next, const std::string& why);
  void record(nlohmann::json event);
  void start_generation(plan::RankPlan plan);
  /// `decision`: the recovery decision's why, shown with the state change.
  void stop_generation(Ending ending, ExitCode exit_code, const std::string& decision = "");
  void finish_stop();
  /// A failure of the running generation: gathers the facts for decide_recovery() (restart,
  /// replace, shrink or give up) and carries its decision out.
  void handle_failure(RootCause cause, bool host_lost);
  int64_t newest_step() const;
  /// Whether the generation being ended made progress (elastic.crash_loop_after counts those
  /// that did not): its step advanced, a newer checkpoint was committed, or — when neither can
  /// be known — it ran at least progress_window().
  bool generation_made_progress();
  Millis progress_window() const;
  void add_incident(nlohmann::json incident);
  /// A RootCause of `kind` for `rank` of this generation: its host, local rank and pid from the
  /// plan and its status, observed now (callers adjust pid, code, signal or time).
  RootCause rank_cause(std::string kind, int rank, std::string detail) const;
  std::vector<std::string> live_hosts() const;
  const plan::RankSlot* slot(int rank) const;

  spec::JobSpec spec_;
  plan::RankPlan plan_;
  const Clock& clock_;
  std::vector<Action> out_;

  RunState state_ = RunState::connecting;
  int generation_ = -1;
  std::set<std::string> connected_;
  std::set<std::string> excluded_;
  std::map<std::string, int> host_failures_;
  std::vector<RankStatus> ranks_;
  int started_count_ = 0;
  int comm_ready_count_ = 0;
  bool hang_exemption_recorded_ = false;  ///< this generation's "not watched for hangs" event
  std::vector<int> unwatched_ranks_;       ///< named in it and not heard since (hang_detection.on)
  int64_t generation_started_ms_ = 0;
  int64_t save_ended_ms_ = 0;  ///< this generation's last end of a checkpoint save (any rank)
  int64_t generation_spawned_ms_ = 0;     ///< monotonic; 0 until GenerationSpawned

  Ending ending_ = Ending::none;
  ExitCode ending_code_ = ExitCode::ok;
  std::set<std::string> awaiting_release_;
  int64_t stop_sent_ms_ = 0;
  int64_t stop_deadline_ms_ = 0;

  std::optional<RootCause> root_cause_;
  std::string give_up_reason_;
  std::optional<PendingRecovery> recovery_;
  std::optional<InPlace> in_place_;
  nlohmann::json last_recovery_;
  std::vector<nlohmann::json> incidents_;
  std::vector<int64_t> failure_times_ms_;  ///< monotonic, for restart_window
  int restarts_ = 0;
  int64_t latest_checkpoint_step_ = -1;
  std::set<int64_t> committed_steps_;  ///< minus the ones found damaged
  int generations_without_progress_ = 0;
  int64_t generation_start_checkpoint_ = -1;  ///< newest committed step when this generation started
  bool steps_reported_ = false;
  std::set<std::string> exclusion_refused_;   ///< hosts past exclude_after that no plan can spare               ///< the last generation judged had reported steps
  int64_t generation_start_step_ = -1;
};

}  // namespace dtrain::supervisor
