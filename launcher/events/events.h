#pragma once
// The run log's events as small typed structs, one per name of the catalogue
// (event_catalogue.h): each names its event and has one to_json() that writes the line
// events.jsonl holds (less "ts", which the log adds). Writers build these, never JSON by hand,
// so an event's fields are spelled once. The format is a contract (status, logs, report, the
// registry and old run directories read it): optional fields are left out when absent, never
// written as null. Parts that are open-ended by nature (a drill's report, per-phase timings, an
// agent's host facts) stay JSON members. The supervisor writes most of these, so this module
// depends on base alone.
//
// Each struct's from_json() reads what its to_json() wrote, and the Event variant (event.h)
// holds any one of them: readers visit that, never look a field up by its name. A field
// that is absent keeps its default (older dtrains wrote fewer of them); one of another JSON type
// makes the event an error that names the field, never an exception. from_json(to_json(e)) == e.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "launcher/base/result.h"
#include "launcher/events/event_catalogue.h"
#include "launcher/events/health_events.h"  // host.health, host.quarantined
#include "launcher/events/stack_events.h"  // host.stack, stack.consistency

namespace dtrain::events {

/// A FailureKind in JSON is its catalogue name, wherever it is written ({"kind", cause.kind}
/// too): never the enumerator's number.
inline void to_json(nlohmann::json& out, FailureKind kind) { out = to_string(kind); }

// ---- the run

struct RunSubmitted {
  static constexpr const char* name = kRunSubmitted;
  std::string run_id{};
  std::string run_name{};  ///< the spec's name ("name" in the log)
  std::string tenant{};
  std::string user{};
  std::string spec{};  ///< path of the spec the run used
  std::vector<std::string> hosts{};
  int world_size = 0;
  std::string dtrain_version{};
  int supervisor_pid = 0;
  std::string supervisor_host{};
  bool detached = false;
  nlohmann::json to_json() const;
  static Result<RunSubmitted> from_json(const nlohmann::json& event);
  bool operator==(const RunSubmitted&) const = default;
};

struct RunResumed {
  static constexpr const char* name = kRunResumed;
  std::string previous_state{};
  int previous_supervisor_pid = 0;
  std::string previous_supervisor_host{};
  int64_t waited_ms = 0;
  int64_t resume_step = -1;
  int gen = 0;
  int supervisor_pid = 0;
  std::string supervisor_host{};
  std::string dtrain_version{};
  bool detached = false;
  nlohmann::json to_json() const;
  static Result<RunResumed> from_json(const nlohmann::json& event);
  bool operator==(const RunResumed&) const = default;
};

struct RunState {
  static constexpr const char* name = kRunState;
  std::string state{};
  std::string why{};
  nlohmann::json to_json() const;
  static Result<RunState> from_json(const nlohmann::json& event);
  bool operator==(const RunState&) const = default;
};

struct RunStopRequested {
  static constexpr const char* name = kRunStopRequested;
  std::string reason{};
  nlohmann::json to_json() const;
  static Result<RunStopRequested> from_json(const nlohmann::json& event);
  bool operator==(const RunStopRequested&) const = default;
};

/// run.finished's root cause: the end-of-run summary's short form (rank -1 when the cause is no
/// rank's).
struct RunRootCause {
  FailureKind kind = FailureKind::worker_exit;
  std::string host{};
  int rank = -1;
  std::string detail{};
  std::optional<std::string> traceback{};
  nlohmann::json to_json() const;
  static Result<RunRootCause> from_json(const nlohmann::json& cause);
  bool operator==(const RunRootCause&) const = default;
};

struct RunFinished {
  static constexpr const char* name = kRunFinished;
  std::string state{};
  int exit_code = 0;
  int restarts = 0;
  int generations = 0;
  int64_t duration_ms = 0;
  std::vector<nlohmann::json> incidents{};  ///< failure.detected events; left out when none
  std::optional<RunRootCause> root_cause{};
  std::string reason{};  ///< why the supervisor gave up; left out when empty
  nlohmann::json to_json() const;
  static Result<RunFinished> from_json(const nlohmann::json& event);
  bool operator==(const RunFinished&) const = default;
};

/// What the run-log writer dropped while the run directory's file system was behind
/// (RunLogWriter's bound): one event per stall, written once the writes go through again.
struct RunlogDropped {
  static constexpr const char* name = kRunlogDropped;
  uint64_t bytes = 0;
  uint64_t writes = 0;
  std::string detail{};
  std::map<std::string, uint64_t> kinds{};  ///< writes per kind: "rank_output", "metrics", an event name
  std::string first_ts{};                   ///< when the first / last dropped write was made
  std::string last_ts{};
  nlohmann::json to_json() const;
  static Result<RunlogDropped> from_json(const nlohmann::json& event);
  bool operator==(const RunlogDropped&) const = default;
};

// ---- hosts

/// The runtime directory asked for (/tmp/dtrain-<uid>/<id>) was refused; `path` is used instead.
struct RuntimeDirFallback {
  static constexpr const char* name = kRuntimeDirFallback;
  std::string path{};
  std::string refused{};
  nlohmann::json to_json() const;
  static Result<RuntimeDirFallback> from_json(const nlohmann::json& event);
  bool operator==(const RuntimeDirFallback&) const = default;
};

/// kubernetes.created and kubernetes.deleted name the same objects (launcher/hosts CreatedJob),
/// in "namespace" ("" is the kubeconfig context's own): what `kind` says, named `job` (the Job,
/// or the JobSet), and the Service of its pods (dtrain's own beside a Job; a JobSet's controller
/// makes and deletes it). "kind" is absent from logs older than JobSets: a Job.
struct KubernetesObjects {
  std::string namespace_name{};
  std::string job{};
  std::string service{};
  KubernetesKind kind = KubernetesKind::job;
  bool operator==(const KubernetesObjects&) const = default;
};

/// What dtrain created, so that it is deleted at the end, and by a resume when the supervisor
/// that made it died.
struct KubernetesCreated : KubernetesObjects {
  static constexpr const char* name = kKubernetesCreated;
  std::string selector{};  ///< of its pods: dtrain.io/run=RUN,dtrain.io/job=JOB
  int pods = 0;            ///< kubernetes.job.pods
  nlohmann::json to_json() const;
  static Result<KubernetesCreated> from_json(const nlohmann::json& event);
  bool operator==(const KubernetesCreated&) const = default;
};

/// Those deleted, and why (the run ended, a resume cleared what a supervisor that died left);
/// `error` when kubectl could not delete them.
struct KubernetesDeleted : KubernetesObjects {
  static constexpr const char* name = kKubernetesDeleted;
  std::string why{};                   ///< "the run ended (preempted)"
  std::optional<std::string> error{};  ///< what kubectl said when it could not
  nlohmann::json to_json() const;
  static Result<KubernetesDeleted> from_json(const nlohmann::json& event);
  bool operator==(const KubernetesDeleted&) const = default;
};

struct SshInsecure {
  static constexpr const char* name = kSshInsecure;
  std::string detail{};
  nlohmann::json to_json() const;
  static Result<SshInsecure> from_json(const nlohmann::json& event);
  bool operator==(const SshInsecure&) const = default;
};

struct HostConnected {
  static constexpr const char* name = kHostConnected;
  std::string host{};
  int64_t agent_pid = 0;
  std::string version{};
  int64_t clock_offset_ms = 0;
  std::string relayed_by{};  ///< the relay that carries this host's agent (scale.tree); "": direct
  nlohmann::json to_json() const;
  static Result<HostConnected> from_json(const nlohmann::json& event);
  bool operator==(const HostConnected&) const = default;
};

/// A relayed host reached again after its relay's loss (scale.tree): not lost.
struct HostReattached {
  static constexpr const char* name = kHostReattached;
  std::string host{};
  std::string from{};        ///< the relay that was lost
  int64_t detached_ms = 0;   ///< how long the agent waited, by its clock
  int64_t gap_ms = 0;        ///< from the relay's loss to the re-attach, by the supervisor's
  int64_t workers = 0;       ///< workers the agent kept
  nlohmann::json to_json() const;
  static Result<HostReattached> from_json(const nlohmann::json& event);
  bool operator==(const HostReattached&) const = default;
};

/// The agent's facts are its own JSON (untrusted, checked where read): the known keys are
/// copied as they came, the rest left out.
struct HostFacts {
  static constexpr const char* name = kHostFacts;
  std::string host{};
  nlohmann::json agent_facts = nlohmann::json::object();
  nlohmann::json to_json() const;
  static Result<HostFacts> from_json(const nlohmann::json& event);
  bool operator==(const HostFacts&) const = default;
};

struct HostFailed {
  static constexpr const char* name = kHostFailed;
  std::string host{};
  std::string error{};
  nlohmann::json to_json() const;
  static Result<HostFailed> from_json(const nlohmann::json& event);
  bool operator==(const HostFailed&) const = default;
};

struct HostLost {
  static constexpr const char* name = kHostLost;
  std::string host{};
  std::string reason{};
  bool was_connected = false;
  std::optional<int64_t> silent_ms{};
  nlohmann::json to_json() const;
  static Result<HostLost> from_json(const nlohmann::json& event);
  bool operator==(const HostLost&) const = default;
};

/// host.excluded and host.exclusion_skipped carry the same fields.
struct HostFailureCount {
  std::string host{};
  int failures = 0;
  std::string detail{};
  bool operator==(const HostFailureCount&) const = default;
};

struct HostExcluded : HostFailureCount {
  static constexpr const char* name = kHostExcluded;
  nlohmann::json to_json() const;
  static Result<HostExcluded> from_json(const nlohmann::json& event);
  bool operator==(const HostExcluded&) const = default;
};

struct HostExclusionSkipped : HostFailureCount {
  static constexpr const char* name = kHostExclusionSkipped;
  nlohmann::json to_json() const;
  static Result<HostExclusionSkipped> from_json(const nlohmann::json& event);
  bool operator==(const HostExclusionSkipped&) const = default;
};

struct AgentError {
  static constexpr const char* name = kAgentError;
  std::string host{};
  std::string message{};
  nlohmann::json to_json() const;
  static Result<AgentError> from_json(const nlohmann::json& event);
  bool operator==(const AgentError&) const = default;
};

/// From an agent (no pid, gen or rank) or from a worker (pid always; gen and rank once it said
/// hello).
struct ProtocolError {
  static constexpr const char* name = kProtocolError;
  std::string sender{};  ///< "agent" or "worker"
  std::string host{};
  std::string error{};
  int count = 0;
  std::optional<int64_t> pid{};
  std::optional<int> gen{};
  std::optional<int> rank{};
  nlohmann::json to_json() const;
  static Result<ProtocolError> from_json(const nlohmann::json& event);
  bool operator==(const ProtocolError&) const = default;
};

/// send_signal() refused to signal pid or group <= 1 (launcher/base/process_signal.h): nothing
/// was sent. `target` is the pid (or -group) as asked.
struct SignalRefused {
  static constexpr const char* name = kSignalRefused;
  int target = 0;
  std::string signal{};
  std::string error{};
  nlohmann::json to_json() const;
  static Result<SignalRefused> from_json(const nlohmann::json& event);
  bool operator==(const SignalRefused&) const = default;
};

// ---- generations and workers

struct PlanGeneration {
  static constexpr const char* name = kPlanGeneration;
  int gen = 0;
  int world_size = 0;
  int data = 0;
  int tensor = 0;
  int pipeline = 0;
  int grad_accum = 0;
  int64_t resume_step = -1;
  std::vector<std::string> hosts{};
  nlohmann::json to_json() const;
  static Result<PlanGeneration> from_json(const nlohmann::json& event);
  bool operator==(const PlanGeneration&) const = default;
};

struct PlanChanged {
  static constexpr const char* name = kPlanChanged;
  std::string diff{};
  std::vector<std::string> without{};
  nlohmann::json to_json() const;
  static Result<PlanChanged> from_json(const nlohmann::json& event);
  bool operator==(const PlanChanged&) const = default;
};

struct GenerationSpawned {
  static constexpr const char* name = kGenerationSpawned;
  int gen = 0;
  std::string master_addr{};
  int master_port = 0;
  std::string backend{};
  int64_t resume_step = -1;
  std::string checkpoint_dir{};
  nlohmann::json to_json() const;
  static Result<GenerationSpawned> from_json(const nlohmann::json& event);
  bool operator==(const GenerationSpawned&) const = default;
};

struct GenerationStepped {
  static constexpr const char* name = kGenerationStepped;
  int gen = 0;
  int64_t step = 0;
  int64_t ms_since_spawn = 0;
  nlohmann::json to_json() const;
  static Result<GenerationStepped> from_json(const nlohmann::json& event);
  bool operator==(const GenerationStepped&) const = default;
};

struct WorkerStarted {
  static constexpr const char* name = kWorkerStarted;
  int rank = 0;
  std::string host{};
  int local_rank = 0;
  int pid = 0;
  nlohmann::json to_json() const;
  static Result<WorkerStarted> from_json(const nlohmann::json& event);
  bool operator==(const WorkerStarted&) const = default;
};

struct WorkerSpawnFailed {
  static constexpr const char* name = kWorkerSpawnFailed;
  int rank = 0;
  std::string host{};
  std::string error{};
  nlohmann::json to_json() const;
  static Result<WorkerSpawnFailed> from_json(const nlohmann::json& event);
  bool operator==(const WorkerSpawnFailed&) const = default;
};

/// The rank's TORCHELASTIC_ERROR_FILE: the exception, not just the exit code.
struct WorkerError {
  std::string message{};
  std::optional<std::string> type{};
  std::optional<std::string> traceback{};
  std::optional<int64_t> timestamp{};  ///< unix seconds, the worker's clock
  nlohmann::json to_json() const;
  static Result<WorkerError> from_json(const nlohmann::json& event);
  bool operator==(const WorkerError&) const = default;
};

/// Exactly one of code and signal is set.
struct WorkerExit {
  static constexpr const char* name = kWorkerExit;
  int gen = 0;
  int rank = 0;
  std::string host{};
  int64_t pid = 0;
  std::optional<int> local_rank{};  ///< absent when the rank is not in the current plan
  std::optional<int> code{};
  std::optional<std::string> signal{};
  std::string log{};  ///< the rank's log file
  std::vector<std::string> tail{};
  std::optional<WorkerError> error{};
  nlohmann::json to_json() const;
  static Result<WorkerExit> from_json(const nlohmann::json& event);
  bool operator==(const WorkerExit&) const = default;
};

struct WorkerHang {
  static constexpr const char* name = kWorkerHang;
  int rank = 0;
  std::string host{};
  int pid = 0;
  int64_t step = 0;
  std::string phase{};  ///< "train" or "checkpoint"
  int64_t silent_ms = 0;
  int64_t limit_ms = 0;  ///< the hang (or checkpoint) timeout in force that it passed
  nlohmann::json to_json() const;
  static Result<WorkerHang> from_json(const nlohmann::json& event);
  bool operator==(const WorkerHang&) const = default;
};

/// The sample's path and size are added where it is written (RunRecorder::write_file_then_record);
/// error says why there is none.
struct WorkerSample {
  static constexpr const char* name = kWorkerSample;
  int rank = 0;
  std::string host{};
  int64_t pid = 0;
  std::optional<std::string> error{};
  std::optional<std::string> path{};  ///< where the sample was written
  std::optional<int64_t> bytes{};     ///< its size
  nlohmann::json to_json() const;
  static Result<WorkerSample> from_json(const nlohmann::json& event);
  bool operator==(const WorkerSample&) const = default;
};

struct CommReady {
  static constexpr const char* name = kCommReady;
  int ranks = 0;
  int64_t ms_since_spawn = 0;
  nlohmann::json to_json() const;
  static Result<CommReady> from_json(const nlohmann::json& event);
  bool operator==(const CommReady&) const = default;
};

/// The first NCCL WARN line of a rank, or (repeated > 0) the count of those that followed it
/// within window_s, with the last one.
struct CommWarn {
  static constexpr const char* name = kCommWarn;
  int gen = 0;
  int rank = 0;
  std::string host{};
  std::string line{};
  int64_t repeated = 0;  ///< left out, with window_s and detail, when 0
  double window_s = 0;
  std::string detail{};
  nlohmann::json to_json() const;
  static Result<CommWarn> from_json(const nlohmann::json& event);
  bool operator==(const CommWarn&) const = default;
};

/// The dump's path and size on the launch node are added where it is written; else kept_path
/// (and detail) name where a large one stays, or error says why there is none.
struct HangDump {
  static constexpr const char* name = kHangDump;
  int gen = 0;
  int rank = 0;
  std::string host{};
  int64_t pid = 0;
  int64_t dump_bytes = 0;
  std::optional<std::string> error{};
  std::optional<std::string> kept_path{};
  std::optional<std::string> detail{};
  std::optional<std::string> path{};  ///< where the copy was written
  std::optional<int64_t> bytes{};     ///< its size
  nlohmann::json to_json() const;
  static Result<HangDump> from_json(const nlohmann::json& event);
  bool operator==(const HangDump&) const = default;
};

struct HangDetectionOff {
  static constexpr const char* name = kHangDetectionOff;
  std::vector<int> ranks{};
  std::string detail{};
  nlohmann::json to_json() const;
  static Result<HangDetectionOff> from_json(const nlohmann::json& event);
  bool operator==(const HangDetectionOff&) const = default;
};

struct HangDetectionOn {
  static constexpr const char* name = kHangDetectionOn;
  std::vector<int> ranks{};
  int64_t after_ms = 0;
  std::string detail{};
  nlohmann::json to_json() const;
  static Result<HangDetectionOn> from_json(const nlohmann::json& event);
  bool operator==(const HangDetectionOn&) const = default;
};

/// The hang timeouts in force (launcher/supervisor/hang_timeouts.h): recorded as
/// hang_timeout.changed when an auto one moves, and kept in state.json for status and the report.
struct HangTimeoutChanged {
  static constexpr const char* name = kHangTimeoutChanged;
  /// Where hang_timeout_ms comes from.
  static constexpr const char* kSpec = "spec";            ///< heartbeat.hang_timeout as the spec sets it
  static constexpr const char* kWarmUp = "warm-up";       ///< auto, before the generation's steps are known
  static constexpr const char* kStepTime = "step time";   ///< auto: factor × the longest step seen
  static constexpr const char* kFloor = "floor";          ///< auto: the floor, longer than factor × step
  int gen = 0;
  int64_t hang_timeout_ms = 0;
  int64_t checkpoint_timeout_ms = 0;  ///< a rank in a checkpoint save
  int64_t progress_window_ms = 0;     ///< elastic.progress_window
  std::string basis{};                ///< one of the constants above
  int factor = 0;                     ///< the safety factor (0 with basis "spec")
  std::optional<int64_t> longest_step_ms{};  ///< the estimate: the longest interval between steps seen
  std::optional<int64_t> longest_save_ms{};  ///< the longest checkpoint save seen
  /// One line for status and the report: "1.5s auto (5 × longest step 300ms)".
  std::string text() const;
  nlohmann::json to_json() const;
  static Result<HangTimeoutChanged> from_json(const nlohmann::json& event);
  bool operator==(const HangTimeoutChanged&) const = default;
};

/// straggler.detected and straggler.cleared carry the same fields.
struct StragglerScore {
  int gen = 0;
  std::string host{};
  int rank = 0;
  double score = 1;
  double median_step_ms = 0;
  double fastest_median_ms = 0;
  bool operator==(const StragglerScore&) const = default;
};

struct StragglerDetected : StragglerScore {
  static constexpr const char* name = kStragglerDetected;
  nlohmann::json to_json() const;
  static Result<StragglerDetected> from_json(const nlohmann::json& event);
  bool operator==(const StragglerDetected&) const = default;
};

struct StragglerCleared : StragglerScore {
  static constexpr const char* name = kStragglerCleared;
  nlohmann::json to_json() const;
  static Result<StragglerCleared> from_json(const nlohmann::json& event);
  bool operator==(const StragglerCleared&) const = default;
};

// ---- GPUs

struct GpuXid {
  static constexpr const char* name = kGpuXid;
  std::string host{};
  int gpu = 0;
  int64_t xid = 0;
  nlohmann::json to_json() const;
  static Result<GpuXid> from_json(const nlohmann::json& event);
  bool operator==(const GpuXid&) const = default;
};

struct GpuEccErrors {
  static constexpr const char* name = kGpuEccErrors;
  std::string host{};
  int gpu = 0;
  int64_t uncorrected = 0;
  int64_t previous = 0;
  nlohmann::json to_json() const;
  static Result<GpuEccErrors> from_json(const nlohmann::json& event);
  bool operator==(const GpuEccErrors&) const = default;
};

// ---- failures and recoveries

/// A failure: what, where, and the detail. failure.detected is one (flat); recovery.started and
/// recovery.completed name theirs under "cause".
struct FailureCause {
  FailureKind kind = FailureKind::worker_exit;
  std::string host{};
  std::string detail{};
  std::optional<int> rank{};
  int local_rank = -1;  ///< written with rank
  std::optional<int> pid{};
  std::optional<int> code{};
  std::optional<std::string> signal{};
  std::optional<std::string> traceback{};
  nlohmann::json to_json() const;
  static Result<FailureCause> from_json(const nlohmann::json& event);
  bool operator==(const FailureCause&) const = default;
};

struct FailureDetected {
  static constexpr const char* name = kFailureDetected;
  FailureCause cause{};
  std::optional<int64_t> latency_ms{};  ///< from when the failure was observable
  std::optional<std::string> detected_by{};
  nlohmann::json to_json() const;
  static Result<FailureDetected> from_json(const nlohmann::json& event);
  bool operator==(const FailureDetected&) const = default;
};

struct FailureRootCause {
  static constexpr const char* name = kFailureRootCause;
  int rank = 0;
  std::string host{};
  std::string detail{};
  nlohmann::json to_json() const;
  static Result<FailureRootCause> from_json(const nlohmann::json& event);
  bool operator==(const FailureRootCause&) const = default;
};

struct FailureBudgetExhausted {
  static constexpr const char* name = kFailureBudgetExhausted;
  int max_restarts = 0;
  int64_t restart_window_ms = 0;
  std::string detail{};
  nlohmann::json to_json() const;
  static Result<FailureBudgetExhausted> from_json(const nlohmann::json& event);
  bool operator==(const FailureBudgetExhausted&) const = default;
};

struct FailureCrashLoop {
  static constexpr const char* name = kFailureCrashLoop;
  int generations = 0;
  std::string detail{};
  nlohmann::json to_json() const;
  static Result<FailureCrashLoop> from_json(const nlohmann::json& event);
  bool operator==(const FailureCrashLoop&) const = default;
};

struct FailureUnrecoverable {
  static constexpr const char* name = kFailureUnrecoverable;
  std::string detail{};
  nlohmann::json to_json() const;
  static Result<FailureUnrecoverable> from_json(const nlohmann::json& event);
  bool operator==(const FailureUnrecoverable&) const = default;
};

struct RecoveryStarted {
  static constexpr const char* name = kRecoveryStarted;
  FailureCause cause{};
  int restarts = 0;
  std::string action{};  ///< "restart", "replace", "shrink", or "resume"
  std::optional<std::string> why{};  ///< the decision's reason; a resume says who decided
  nlohmann::json to_json() const;
  static Result<RecoveryStarted> from_json(const nlohmann::json& event);
  bool operator==(const RecoveryStarted&) const = default;
};

struct RecoveryCompleted {
  static constexpr const char* name = kRecoveryCompleted;
  FailureKind kind = FailureKind::worker_exit;  ///< the cause's kind
  FailureCause cause{};
  nlohmann::json phases = nlohmann::json::object();  ///< "<phase>_ms" timings, the phases that happened
  int64_t resume_step = -1;
  int64_t last_step = -1;
  int64_t steps_lost = 0;
  int world_size = 0;
  int restarts = 0;
  /// How the run recovered: "restart", "replace", "shrink", "resume", or "in-place" (only the
  /// failed rank's process was replaced; the others kept their state).
  std::string action{};
  /// Set when an in-place recovery was tried first and fell back to this one: why.
  std::optional<std::string> fallback{};
  nlohmann::json to_json() const;
  static Result<RecoveryCompleted> from_json(const nlohmann::json& event);
  bool operator==(const RecoveryCompleted&) const = default;
};

/// In-place recovery: the workers of generation `gen - 1` on `host` that survived now belong to
/// `gen`, without a restart (the agent's gen_changed answer).
struct RecoveryCarriedOver {
  static constexpr const char* name = kRecoveryCarriedOver;
  int gen = 0;
  std::string host{};
  std::vector<int> ranks{};
  std::vector<int64_t> pids{};
  nlohmann::json to_json() const;
  static Result<RecoveryCarriedOver> from_json(const nlohmann::json& event);
  bool operator==(const RecoveryCarriedOver&) const = default;
};

/// An in-place recovery that could not finish (a survivor missing or failing, or past
/// elastic.in_place_timeout): the generation is stopped and every worker restarted instead.
struct RecoveryFallback {
  static constexpr const char* name = kRecoveryFallback;
  int gen = 0;
  std::string detail{};
  nlohmann::json to_json() const;
  static Result<RecoveryFallback> from_json(const nlohmann::json& event);
  bool operator==(const RecoveryFallback&) const = default;
};

struct ResourcesReleased {
  static constexpr const char* name = kResourcesReleased;
  int gen = 0;
  std::string host{};
  std::vector<int64_t> killed{};
  int64_t remaining = 0;
  int64_t ms = 0;
  nlohmann::json to_json() const;
  static Result<ResourcesReleased> from_json(const nlohmann::json& event);
  bool operator==(const ResourcesReleased&) const = default;
};

struct ResourcesUnconfirmed {
  static constexpr const char* name = kResourcesUnconfirmed;
  std::vector<std::string> hosts{};
  std::string detail{};
  nlohmann::json to_json() const;
  static Result<ResourcesUnconfirmed> from_json(const nlohmann::json& event);
  bool operator==(const ResourcesUnconfirmed&) const = default;
};

// ---- checkpoints

struct CheckpointCommitted {
  static constexpr const char* name = kCheckpointCommitted;
  int gen = 0;
  int rank = 0;
  std::string host{};
  int64_t step = 0;
  int64_t bytes = 0;
  double seconds = 0;
  /// How long training stood still for it, when the saver says (an asynchronous save stalls
  /// less than it takes); goodput counts this rather than seconds.
  std::optional<double> stall_seconds{};
  nlohmann::json to_json() const;
  static Result<CheckpointCommitted> from_json(const nlohmann::json& event);
  bool operator==(const CheckpointCommitted&) const = default;
};

struct CheckpointRejected {
  static constexpr const char* name = kCheckpointRejected;
  int gen = 0;
  int rank = 0;
  std::string host{};
  int64_t step = 0;
  std::string reason{};
  nlohmann::json to_json() const;
  static Result<CheckpointRejected> from_json(const nlohmann::json& event);
  bool operator==(const CheckpointRejected&) const = default;
};

struct CheckpointRequested {
  static constexpr const char* name = kCheckpointRequested;
  int gen = 0;
  std::string reason{};
  int64_t step = 0;
  int ranks = 0;
  nlohmann::json to_json() const;
  static Result<CheckpointRequested> from_json(const nlohmann::json& event);
  bool operator==(const CheckpointRequested&) const = default;
};

// ---- drills

/// What a drill did and when; the rest depends on the fault (a corrupted checkpoint, the host's
/// workers and how the host was cut).
struct DrillInjected {
  static constexpr const char* name = kDrillInjected;
  std::string fault{};
  std::string target{};
  int pid = 0;
  int64_t at_step = 0;
  int gen = -1;
  std::optional<int64_t> corrupted_step{};  ///< written with corrupted_file
  std::string corrupted_file{};
  std::optional<std::vector<int>> workers{};
  std::optional<std::string> method{};
  std::optional<std::string> detail{};
  std::optional<int64_t> duration_ms{};
  nlohmann::json to_json() const;
  static Result<DrillInjected> from_json(const nlohmann::json& event);
  bool operator==(const DrillInjected&) const = default;
};

struct DrillCorrupted {
  static constexpr const char* name = kDrillCorrupted;
  int64_t step = 0;
  std::string file{};
  std::string why{};
  nlohmann::json to_json() const;
  static Result<DrillCorrupted> from_json(const nlohmann::json& event);
  bool operator==(const DrillCorrupted&) const = default;
};

/// The drill's report (drill::to_json) as it is.
struct DrillVerdict {
  static constexpr const char* name = kDrillVerdict;
  nlohmann::json report = nlohmann::json::object();
  nlohmann::json to_json() const;
  static Result<DrillVerdict> from_json(const nlohmann::json& event);
  bool operator==(const DrillVerdict&) const = default;
};


}  // namespace dtrain::events
