#pragma once
// The supervisor's vocabulary: the states of a run, the events it reacts to and the actions it
// asks the driver (launcher/run) to carry out. Plain structs, so tests can script them.

#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "launcher/base/exit_code.h"
#include "launcher/events/event_catalogue.h"
#include "launcher/events/health_events.h"
#include "launcher/events/stack_events.h"
#include "launcher/plan/rank_plan.h"

namespace dtrain::supervisor {

/// What failed (the events catalogue's kinds: worker.exit, host.lost, ...).
using FailureKind = events::FailureKind;

/// The states of a run. Terminal: succeeded, failed, stopped.
enum class RunState {
  connecting,  ///< agents are being started; waiting for every host's hello
  launching,   ///< generation g was spawned; waiting for every worker's `started`
  running,     ///< every worker of generation g runs
  recovering,  ///< a failure is being handled: old generation stopping, next one not yet started
  stopping,    ///< the run is ending (success, failure or stop request): waiting for `released`
  succeeded,   ///< every worker exited 0
  failed,      ///< a failure the policy could not recover from
  stopped,     ///< stopped on request (Ctrl-C, SIGHUP, `dtrain stop`)
  preempted    ///< stopped for a preemption (SIGTERM, `dtrain stop --checkpoint`) after a save was asked
};
const char* to_string(RunState state);
bool is_terminal(RunState state);

// ---- events (what happened) -----------------------------------------------------------------

/// An agent said hello, with its host's software stack when config asked for one (absent: the
/// agent did not say, or it did not parse: every item is then unknown).
struct HostConnected {
  std::string host;
  std::optional<events::HostStack> stack{};
  /// Its agent was asked to check the host (config.health): its `start` checks are awaited
  /// before the host is used, and it answers health requests later.
  bool health_requested = false;
};
/// A host's health checks came back: its agent's `start` checks after hello (config.health), or
/// the answer to CheckHostHealth. `health` holds what the agent found (host, moment, verdict,
/// checks, ms); the supervisor decides the action and writes host.health.
struct HostHealthReported {
  std::string host;
  events::HostHealth health{};
};
/// An agent's connection failed or fell silent past heartbeat.timeout (or never came up).
struct HostLost {
  std::string host;
  std::string reason;
  /// When the loss is silence: how long nothing had arrived when it was declared (the
  /// detection latency an operator checks against heartbeat.timeout); -1 otherwise.
  int64_t silent_ms = -1;
};
struct WorkerStarted { int gen = 0; int rank = 0; int pid = 0; };
struct WorkerSpawnFailed { int gen = 0; int rank = 0; std::string error; };
/// A worker process ended. `observed_ms` is the agent's clock corrected to the supervisor's, so
/// the first failure by time is found across hosts whose clocks differ.
struct WorkerExited {
  int gen = 0;
  int rank = 0;
  int pid = 0;
  std::optional<int> code;
  std::optional<std::string> signal;  ///< "SIGKILL"
  int64_t observed_ms = 0;
  /// How far observed_ms may be off (the clock offset's uncertainty): an exit is only ordered
  /// before another event when it is earlier by more than this.
  int64_t observed_uncertainty_ms = 0;
  /// The agent's kill or fence signalled it: a consequence of a stop, never a root cause.
  bool killed_by_agent = false;
  /// The exception the worker left in its TORCHELASTIC_ERROR_FILE (exit.error), if any.
  std::optional<std::string> error_type;     ///< "ValueError"
  std::optional<std::string> error_message;  ///< "bad batch"
  std::optional<std::string> traceback;
  /// Its last lines of output (the agent's tail): whether it blames a peer (failure_blame.h).
  std::vector<std::string> last_output;
};
/// A worker's heartbeat carried a step.
/// A worker's beat: its step, and whether it is in a checkpoint save from now on (nullopt:
/// unchanged; wire.h "phase").
struct WorkerProgress { int gen = 0; int rank = 0; int64_t step = 0; std::optional<bool> in_checkpoint; };
/// A worker's communicator is up (worker protocol comm.ready): its rendezvous is done.
struct WorkerCommReady { int gen = 0; int rank = 0; };
struct CheckpointCommitted { int gen = 0; int64_t step = 0; };
/// A worker found checkpoint `step` damaged on resume and skipped it.
struct CheckpointRejected { int gen = 0; int64_t step = 0; };
/// The agent saw a worker stopped (process state 'T': SIGSTOP, or a debugger). A stopped rank
/// is the prime suspect when its peers hang waiting for it.
struct WorkerStoppedSeen { int gen = 0; int rank = 0; };
/// A worker kept sending messages that could not be parsed (launcher/run counts protocol
/// errors per sender): treated as a failure of that rank, with `detail` as the root cause.
struct WorkerMisbehaved { int gen = 0; int rank = 0; std::string detail; };
/// A host confirmed that no process of `gen` remains there.
struct GenerationReleased { int gen = 0; std::string host; };
/// Stop the run: a person (Ctrl-C, `dtrain stop`) or a preemption (SIGTERM: a spot notice, a pod
/// deletion, scancel), which the driver turns into this after the checkpoint it asked for (or
/// at once for workers that could not be asked). A preemption ends `preempted` (its exit code),
/// and its workers get `grace_ms` between SIGTERM and SIGKILL instead of stop_grace.
struct StopRequested {
  std::string reason;
  bool preempt = false;
  int64_t grace_ms = 0;  ///< 0: stop_grace
};
/// Time passed (the driver sends one at least every heartbeat interval).
struct Tick {
  /// Hosts whose agents have not been heard from for HangTimeouts::unheard_after_ms() (not yet
  /// lost): an auto hang timeout declares no hang while one of the generation's is unheard.
  std::vector<std::string> unheard_hosts{};
};
/// Rank 0's host answered the port reservation and the driver sent `spawn` for generation
/// `gen` to every host of its plan: the launch deadline now waits for every `started`.
struct GenerationSpawned { int gen = 0; };
/// A launch step of generation `gen` failed on `host`: its agent answered it with an error
/// (`step` "port reservation": reserve_port found no free port). Ends the generation with a
/// failure of kind agent.error.
struct LaunchStepFailed { int gen = 0; std::string host; std::string step; std::string detail; };

/// In-place recovery: `host`'s agent carried its surviving workers over to generation `gen`
/// (its gen_changed answer): `ranks` are alive and now belong to `gen`.
struct SurvivorsCarriedOver { int gen = 0; std::string host; std::vector<int> ranks; std::vector<int64_t> pids; };

using Event = std::variant<HostConnected, HostLost, WorkerStarted, WorkerSpawnFailed, WorkerExited,
                           WorkerProgress, WorkerCommReady, CheckpointCommitted, CheckpointRejected,
                           WorkerStoppedSeen, WorkerMisbehaved,
                           GenerationReleased, StopRequested, Tick, GenerationSpawned, LaunchStepFailed,
                           SurvivorsCarriedOver, HostHealthReported>;

// ---- actions (what the driver must do) ------------------------------------------------------

/// Append to events.jsonl (the driver adds ts and enriches with paths).
struct RecordEvent { nlohmann::json event; };
/// Spawn generation `gen` with `plan` on every host of the plan.
struct StartGeneration {
  int gen = 0;
  plan::RankPlan plan;
  int64_t resume_step = -1;   ///< -1: workers start fresh / discover the latest checkpoint
  int restart_count = 0;      ///< TORCHELASTIC_RESTART_COUNT
};
/// TERM every process of `gen` on every connected host, KILL after `grace_ms`; each host answers
/// with GenerationReleased.
struct StopGeneration { int gen = 0; int64_t grace_ms = 0; std::vector<std::string> hosts; };
/// Before a hung worker is killed: record what it was doing (kernel stack, wchan, a debugger
/// backtrace where possible) into the run directory — the failure sample operators review.
struct CaptureSample { int gen = 0; int rank = 0; std::string host; int pid = 0; };
/// Kill only `ranks` of generation `gen` on `host` (a hung rank before an in-place recovery);
/// its exit comes back as WorkerExited.
struct KillRanks { int gen = 0; std::string host; std::vector<int> ranks; };
/// In-place recovery: generation `from_gen` continues as `gen` with the same `plan`. Every host
/// of `hosts` carries its live workers over (gen_changed; each answers with
/// SurvivorsCarriedOver), and only `replaced` ranks are spawned anew, taking their state from a
/// live replica (DTRAIN_JOIN_LIVE).
struct ContinueInPlace {
  int from_gen = 0;
  int gen = 0;
  plan::RankPlan plan;
  std::vector<int> replaced;
  std::vector<std::string> hosts;
  int restart_count = 0;
};
/// Ask `host`'s agent to run its health checks now (proto::health_moment join or after
/// failure; `diagnose`: the site's diagnose command too); it answers with HostHealthReported.
struct CheckHostHealth { std::string host; std::string moment; bool diagnose = false; };
/// The run is over: disconnect agents and exit with `exit_code`.
struct FinishRun { RunState state = RunState::failed; ExitCode exit_code = ExitCode::job_failed; };

using Action = std::variant<RecordEvent, StartGeneration, StopGeneration, CaptureSample, FinishRun, KillRanks,
                            ContinueInPlace, CheckHostHealth>;

/// What a rank is doing, as far as the supervisor knows.
enum class RankState { pending, starting, running, exited, failed, killed };
const char* to_string(RankState state);

struct RankStatus {
  RankState state = RankState::pending;
  int pid = 0;
  int64_t step = -1;                 ///< newest step reported; -1 before the first beat
  int64_t step_changed_ms = 0;       ///< monotonic time of the last step change
  bool seen_stopped = false;         ///< the agent reported process state 'T' (stopped)
  bool in_checkpoint = false;        ///< its last phase was "checkpoint" (a save in progress)
  int64_t phase_changed_ms = 0;      ///< monotonic time it entered or left a save
  bool comm_ready = false;           ///< its communicator is up (comm.ready)
  std::optional<int> exit_code;
  std::optional<std::string> exit_signal;
};

/// The first failure by time: what `dtrain status` and the end-of-run summary lead with.
struct RootCause {
  FailureKind kind = FailureKind::worker_exit;
  std::string host;
  int rank = -1;
  int local_rank = -1;
  int pid = 0;
  std::optional<int> code;
  std::optional<std::string> signal;
  std::string detail;  ///< "exit code 3", "killed by SIGKILL", the spawn error, the loss reason,
                       ///< or, from the rank's error file, "ValueError: bad batch"
  std::optional<std::string> traceback;  ///< from the rank's error file
  int64_t observed_ms = 0;
  /// Its own words say a peer went first (failure_blame.h): a consequence, blamed only until a
  /// rank that failed on its own is heard of. Not written anywhere.
  bool reads_as_lost_peer = false;
};

/// A run picked up again by `dtrain resume` after its supervisor died: what the dead
/// supervisor's run log says, so that the new one continues where it stopped.
struct ResumeFrom {
  int last_generation = -1;            ///< the newest generation the run log names
  std::vector<int64_t> committed_steps;  ///< checkpoint.committed steps, minus rejected ones
  int64_t last_step = -1;              ///< newest step any rank reported (state.json)
  int restarts = 0;                    ///< restarts already used (state.json)
  /// True when the old supervisor died mid-run (a failure, recovered like one); false when the
  /// run had ended stopped or failed and is simply continued.
  bool supervisor_lost = true;
  int previous_pid = 0;                ///< the dead supervisor
  std::string previous_host;
  /// The old supervisor's last sign of life (state.json updated_at_ms), wall clock.
  int64_t last_seen_wall_ms = 0;
  /// How long `dtrain resume` waited for the old agents to fence before starting this one.
  int64_t waited_ms = 0;
};

}  // namespace dtrain::supervisor
