#pragma once
// The run log's event catalogue: every event name that events.jsonl may hold, what it means,
// and the fields it always carries (beyond "ts" and "ev"). Writers build the typed events of
// events.h, each named by one of these constants; readers compare names with them, never with
// string literals. Tests check every event of real runs against the table (runlog:
// catalogue_problem), every struct of events.h against it, and that dtrain(1) documents every
// name. Header-only, std only: the supervisor (which may use only plan, spec and base) writes
// most events.

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace dtrain::events {

// ---- the run
inline constexpr const char* kRunSubmitted = "run.submitted";
inline constexpr const char* kRunResumed = "run.resumed";
inline constexpr const char* kRunState = "run.state";
inline constexpr const char* kRunStopRequested = "run.stop_requested";
inline constexpr const char* kRunFinished = "run.finished";
inline constexpr const char* kRunlogDropped = "runlog.dropped";
// ---- hosts
inline constexpr const char* kSshInsecure = "ssh.insecure";
inline constexpr const char* kRuntimeDirFallback = "runtime_dir.fallback";
inline constexpr const char* kKubernetesCreated = "kubernetes.created";
inline constexpr const char* kKubernetesDeleted = "kubernetes.deleted";
inline constexpr const char* kHostConnected = "host.connected";
inline constexpr const char* kHostReattached = "host.reattached";
inline constexpr const char* kHostFacts = "host.facts";
inline constexpr const char* kHostStack = "host.stack";
inline constexpr const char* kStackConsistency = "stack.consistency";
inline constexpr const char* kHostHealth = "host.health";
inline constexpr const char* kHostQuarantined = "host.quarantined";
inline constexpr const char* kHostFailed = "host.failed";
inline constexpr const char* kHostLost = "host.lost";
inline constexpr const char* kHostExcluded = "host.excluded";
inline constexpr const char* kHostExclusionSkipped = "host.exclusion_skipped";
inline constexpr const char* kAgentError = "agent.error";
inline constexpr const char* kProtocolError = "protocol.error";
inline constexpr const char* kSignalRefused = "signal.refused";
// ---- generations and workers
inline constexpr const char* kPlanGeneration = "plan.generation";
inline constexpr const char* kPlanChanged = "plan.changed";
inline constexpr const char* kPlanQuarantined = "plan.quarantined";
inline constexpr const char* kGenerationSpawned = "generation.spawned";
inline constexpr const char* kGenerationStepped = "generation.stepped";
inline constexpr const char* kWorkerStarted = "worker.started";
inline constexpr const char* kWorkerSpawnFailed = "worker.spawn_failed";
inline constexpr const char* kWorkerExit = "worker.exit";
inline constexpr const char* kWorkerHang = "worker.hang";
inline constexpr const char* kWorkerSample = "worker.sample";
inline constexpr const char* kCommReady = "comm.ready";
inline constexpr const char* kCommWarn = "comm.warn";
inline constexpr const char* kHangDump = "hang.dump";
inline constexpr const char* kHangDetectionOff = "hang_detection.off";
inline constexpr const char* kHangDetectionOn = "hang_detection.on";
inline constexpr const char* kHangTimeoutChanged = "hang_timeout.changed";
inline constexpr const char* kStragglerDetected = "straggler.detected";
inline constexpr const char* kStragglerCleared = "straggler.cleared";
// ---- GPUs (the agents' resource samples)
inline constexpr const char* kGpuXid = "gpu.xid";
inline constexpr const char* kGpuEccErrors = "gpu.ecc";
// ---- failures and recoveries
inline constexpr const char* kFailureDetected = "failure.detected";
inline constexpr const char* kFailureRootCause = "failure.root_cause";
inline constexpr const char* kFailureBudgetExhausted = "failure.budget_exhausted";
inline constexpr const char* kFailureCrashLoop = "failure.crash_loop";
inline constexpr const char* kFailureUnrecoverable = "failure.unrecoverable";
inline constexpr const char* kRecoveryStarted = "recovery.started";
inline constexpr const char* kRecoveryCompleted = "recovery.completed";
inline constexpr const char* kRecoveryCarriedOver = "recovery.carried_over";
inline constexpr const char* kRecoveryFallback = "recovery.fallback";
inline constexpr const char* kResourcesReleased = "resources.released";
inline constexpr const char* kResourcesUnconfirmed = "resources.unconfirmed";
// ---- checkpoints
inline constexpr const char* kCheckpointCommitted = "checkpoint.committed";
inline constexpr const char* kCheckpointRejected = "checkpoint.rejected";
inline constexpr const char* kCheckpointRequested = "checkpoint.requested";
// ---- drills
inline constexpr const char* kDrillInjected = "drill.injected";
inline constexpr const char* kDrillCorrupted = "drill.corrupted";
inline constexpr const char* kDrillVerdict = "drill.verdict";

struct EventType {
  std::string_view name;
  std::string_view meaning;
  std::vector<std::string_view> fields;  ///< always present (more may be)
};

inline const std::vector<EventType>& catalogue() {
  static const std::vector<EventType> table = {
      {kRunSubmitted, "the run directory exists; the spec, hosts and world size", {"run_id", "name", "spec", "hosts", "world_size", "dtrain_version", "supervisor_pid"}},
      {kRunResumed, "dtrain resume continued the run in a new supervisor", {"previous_state", "waited_ms", "gen", "supervisor_pid"}},
      {kRunState, "the run's state changed, and why", {"state", "why"}},
      {kRunStopRequested, "a stop was asked for (signal, dtrain stop)", {"reason"}},
      {kRunFinished, "the end: state, exit code, restarts, incidents, root cause", {"state", "exit_code", "restarts", "generations", "duration_ms"}},
      {kRunlogDropped, "run-log writes (rank output, metrics, events) dropped while the run directory's file system fell behind: counted by kind, first and last", {"bytes", "writes", "detail", "kinds", "first_ts", "last_ts"}},
      {kSshInsecure, "host keys are not checked (ssh.host_key_policy insecure)", {"detail"}},
      {kRuntimeDirFallback, "the supervisor's runtime directory was refused (another owner, a link, open to others): the run uses a fresh private one", {"path", "refused"}},
      {kKubernetesCreated, "kubernetes.job: what dtrain created for the run (their pods are its hosts): kind (an Indexed Job and its headless Service, or a JobSet), namespace, names, the pods' selector and count", {"namespace", "job", "service", "kind", "selector", "pods"}},
      {kKubernetesDeleted, "what dtrain created for the run deleted again (the Job with its pods and the Service, or the JobSet with all it made), and why; error when kubectl could not", {"namespace", "job", "service", "kind", "why"}},
      {kHostConnected, "a host's agent said hello", {"host", "agent_pid", "version", "clock_offset_ms"}},
      {kHostReattached, "a relayed host whose relay was lost, reached again: its agent kept its workers and the supervisor re-attached to it directly (the host is not lost); from (the lost relay), detached_ms (the agent's wait), gap_ms (the supervisor's, from the relay's loss), workers kept", {"host", "from", "detached_ms", "gap_ms", "workers"}},
      {kHostFacts, "what the agent found on its host (CPUs, memory, GPUs)", {"host"}},
      {kHostStack, "a host's software stack as its agent found it at hello (OS, kernel, GPU driver, CUDA, NCCL, Python and torch of the worker's interpreter, container image, sha256 of the worker command's files); unknown where it could not be read", {"host", "items", "ms"}},
      {kStackConsistency, "the hosts' software stacks compared before the first generation (or a spare's against them): each item a host differs on, beside the majority's value, and what the run did (started, refused, warned, spare left out)", {"mode", "verdict", "action", "hosts", "differences", "detail"}},
      {kHostHealth, "a host's health checks (GPU health from NVML, leftover GPU memory, network ports, the checkpoint directory written and fsynced, free space, the site's own command) at hello, before a re-rendezvous took it in, or after a failure blamed on it; each check's verdict and message, and whether the host was admitted or left out", {"host", "moment", "verdict", "action", "checks", "detail"}},
      {kHostQuarantined, "a host found bad enough to keep out of later runs (a failed health check, or the root cause of health.quarantine.after failures within its window): the registry quarantines it until released or expired", {"host", "reason", "evidence", "duration_ms"}},
      {kHostFailed, "no agent could be started on a host", {"host", "error"}},
      {kHostLost, "a host's agent is gone: connection closed, silent past heartbeat.timeout, or never connected", {"host", "reason", "was_connected"}},
      {kHostExcluded, "a host that failed elastic.exclude_after times is left out of later plans", {"host", "failures", "detail"}},
      {kHostExclusionSkipped, "a host past elastic.exclude_after that no plan can spare: restarted in place", {"host", "failures", "detail"}},
      {kAgentError, "an agent could not do what it was asked", {"host", "message"}},
      {kProtocolError, "a message from a worker or an agent that could not be parsed (dropped)", {"sender", "host", "error", "count"}},
      {kSignalRefused, "an internal bug: a signal to pid or process group <= 1 was refused, not sent", {"target", "signal", "error"}},
      {kPlanGeneration, "the rank plan of a new generation", {"gen", "world_size", "data", "tensor", "pipeline", "grad_accum", "resume_step", "hosts"}},
      {kPlanChanged, "the plan changed: hosts left out, spares taken", {"diff", "without"}},
      {kPlanQuarantined, "hosts of the host list that the registry holds in quarantine, left out of the plan (as hosts not in the list are): each with its reason and until when", {"hosts"}},
      {kGenerationSpawned, "every agent was asked to start its workers", {"gen", "master_addr", "master_port", "backend", "resume_step"}},
      {kGenerationStepped, "a generation's first step: training runs (launch or restart over; goodput counts from here)", {"gen", "step", "ms_since_spawn"}},
      {kWorkerStarted, "a worker process is running", {"rank", "host", "local_rank", "pid"}},
      {kWorkerSpawnFailed, "a worker could not be started", {"rank", "host", "error"}},
      {kWorkerExit, "a worker process ended: code or signal, and its last output", {"gen", "rank", "host", "pid"}},
      {kWorkerHang, "a worker's step stood still past heartbeat.hang_timeout (or checkpoint_timeout while saving) in force (limit_ms)", {"rank", "host", "pid", "step", "phase", "silent_ms", "limit_ms"}},
      {kWorkerSample, "what a hung worker was doing (path of the sample, or why there is none)", {"rank", "host", "pid"}},
      {kCommReady, "every rank's communicator is up", {"ranks", "ms_since_spawn"}},
      {kCommWarn, "an NCCL WARN line; repeats within 10 s counted in one event", {"gen", "rank", "host", "line"}},
      {kHangDump, "a hung rank's PyTorch flight-recorder dump (path of the copy, where it was kept, or why there is none)", {"gen", "rank", "host", "pid"}},
      {kGpuXid, "an Xid (NVIDIA driver error) on a GPU, from NVML", {"host", "gpu", "xid"}},
      {kGpuEccErrors, "a GPU's uncorrected ECC error count rose", {"host", "gpu", "uncorrected", "previous"}},
      {kHangDetectionOff, "ranks without heartbeats: not watched for hangs", {"ranks", "detail"}},
      {kHangDetectionOn, "ranks named by hang_detection.off that beat since: watched from then on", {"ranks", "after_ms", "detail"}},
      {kHangTimeoutChanged, "an auto heartbeat.hang_timeout (and the checkpoint_timeout and elastic.progress_window that follow it) in force changed: a generation's warm-up value, then factor x the longest step seen, never below the floor; recorded when it first leaves warm-up and when it moves by more than 25 %", {"gen", "hang_timeout_ms", "checkpoint_timeout_ms", "progress_window_ms", "basis", "factor"}},
      {kStragglerDetected, "a rank steps slower than the fastest (score = fastest median step time / its own, below metrics.straggler_threshold); once per rank and generation", {"gen", "host", "rank", "score", "median_step_ms", "fastest_median_ms"}},
      {kStragglerCleared, "a rank named by straggler.detected keeps up again (score back above the threshold)", {"gen", "host", "rank", "score"}},
      {kFailureDetected, "a failure: kind, where, and the detail", {"kind", "host", "detail"}},
      {kFailureRootCause, "the failure that the others followed from", {"rank", "host", "detail"}},
      {kFailureBudgetExhausted, "no restart left within elastic.restart_window", {"max_restarts", "restart_window_ms", "detail"}},
      {kFailureCrashLoop, "generations in a row without progress (elastic.crash_loop_after)", {"generations", "detail"}},
      {kFailureUnrecoverable, "no plan can go on without the lost hosts", {"detail"}},
      {kRecoveryStarted, "the decision: restart, replace, shrink or in-place, and why", {"cause", "restarts", "action", "why"}},
      {kRecoveryCompleted, "the new generation stepped: phase timings and steps lost", {"kind", "action", "cause", "phases", "resume_step", "last_step", "steps_lost", "world_size"}},
      {kRecoveryCarriedOver, "in-place recovery: a host's surviving workers now belong to the new generation (not restarted)", {"gen", "host", "ranks", "pids"}},
      {kRecoveryFallback, "an in-place recovery could not finish: every worker is restarted from the newest checkpoint instead", {"gen", "detail"}},
      {kResourcesReleased, "an agent confirmed its workers of a generation are gone", {"gen", "host", "killed", "remaining", "ms"}},
      {kResourcesUnconfirmed, "hosts that did not confirm a stop in time", {"hosts", "detail"}},
      {kCheckpointCommitted, "a complete checkpoint (every shard and the manifest)", {"gen", "rank", "host", "step", "bytes", "seconds"}},
      {kCheckpointRejected, "a checkpoint that did not commit, and why", {"gen", "rank", "host", "step", "reason"}},
      {kCheckpointRequested, "every worker asked to save at one step (SIGUSR1 from Slurm, checkpoint.before_walltime)", {"gen", "reason", "step", "ranks"}},
      {kDrillInjected, "a drill injected a fault", {"fault", "target"}},
      {kDrillCorrupted, "a drill damaged a checkpoint file", {"step", "file", "why"}},
      {kDrillVerdict, "a drill's grade of the recovery", {"drill_id", "verdict", "exit_code", "faults"}},
  };
  return table;
}

inline const EventType* find_event_type(std::string_view name) {
  for (const EventType& type : catalogue()) {
    if (type.name == name) return &type;
  }
  return nullptr;
}

// ---- what kubernetes.job created: the "kind" of kubernetes.created and kubernetes.deleted,
// written as its Kubernetes kind and read back by parse_kubernetes_kind. Logs written before
// dtrain created JobSets have no "kind": their objects are a Job (and its Service).

enum class KubernetesKind {
  job,     ///< an Indexed Job, and the headless Service dtrain created beside it
  jobset,  ///< a JobSet (jobset.x-k8s.io), whose controller made its child Job and the Service
};

inline std::string to_string(KubernetesKind kind) { return kind == KubernetesKind::jobset ? "JobSet" : "Job"; }

inline std::optional<KubernetesKind> parse_kubernetes_kind(std::string_view name) {
  if (name == "Job") return KubernetesKind::job;
  if (name == "JobSet") return KubernetesKind::jobset;
  return std::nullopt;
}

// ---- what failed: the kind of a failure.detected cause, of run.finished's root cause and of
// recovery.completed. Written by its name, read back by parse_failure_kind.

enum class FailureKind {
  worker_exit,      ///< a worker exited non-zero or by a signal
  worker_spawn,     ///< a worker's command could not be started
  worker_hang,      ///< a worker's step did not move for heartbeat.hang_timeout
  worker_protocol,  ///< a worker broke the worker protocol (a bad message, too many of them)
  launch_timeout,   ///< a launch step (rank 0's port, every worker's start) missed its deadline
  host_lost,        ///< a host's agent is gone: dead, cut off, silent
  agent_error,      ///< a host's agent reported an error it cannot go on from
  supervisor_lost,  ///< the supervisor died; `dtrain resume` picked the run up
};

struct FailureKindInfo {
  FailureKind kind;
  std::string_view name;     ///< as events.jsonl writes it: "worker.exit"
  std::string_view meaning;  ///< for dtrain(1) and the report
};

inline constexpr FailureKindInfo kFailureKinds[] = {
    {FailureKind::worker_exit, "worker.exit", "a worker exited non-zero or by a signal"},
    {FailureKind::worker_spawn, "worker.spawn", "a worker's command could not be started"},
    {FailureKind::worker_hang, "worker.hang", "a worker's step did not move for heartbeat.hang_timeout"},
    {FailureKind::worker_protocol, "worker.protocol", "a worker broke the worker protocol"},
    {FailureKind::launch_timeout, "launch.timeout", "a launch step missed its deadline (rank 0's port, a worker's start)"},
    {FailureKind::host_lost, "host.lost", "a host's agent is gone: dead, cut off or silent"},
    {FailureKind::agent_error, "agent.error", "a host's agent reported an error it cannot go on from"},
    {FailureKind::supervisor_lost, "supervisor.lost", "the supervisor died and dtrain resume picked the run up"},
};

inline std::string to_string(FailureKind kind) {
  for (const FailureKindInfo& info : kFailureKinds) {
    if (info.kind == kind) return std::string(info.name);
  }
  return "worker.exit";  // unreachable: every enumerator is in the table (event_catalogue_test)
}

inline std::optional<FailureKind> parse_failure_kind(std::string_view name) {
  for (const FailureKindInfo& info : kFailureKinds) {
    if (info.name == name) return info.kind;
  }
  return std::nullopt;
}

}  // namespace dtrain::events
