#pragma once
// JobSpec: the job as the user described it (YAML schema version 1, man/dtrain-spec.5), after
// parsing, defaults and validation. Everything downstream (plan, run, agents) reads only this.

#include <algorithm>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "launcher/base/duration.h"
#include "launcher/base/host_key_policy.h"
#include "launcher/base/ssh_client.h"

namespace dtrain::spec {

/// One host a job may use, after hostlist expansion, hostfile reading and include/exclude.
struct HostEntry {
  std::string name;              ///< "gpu01" (as written, zero padding kept)
  std::string user;              ///< from "user@host"; empty: ssh.user or the current user
  int port = 0;                  ///< from "host:port"; 0: ssh.port
  int slots = 0;                 ///< workers to place there; 0: slots_per_host (the loader fills it)
  /// include filter "host:0,2": the local slot (device) indices to use, `slots` of them
  /// (empty: 0 .. slots-1). The loader keeps slots == only_slots.size() when it is set.
  std::vector<int> only_slots;
  bool spare = false;            ///< listed under `spares`: used only to replace a lost host
  /// Where the other hosts' workers reach this one (MASTER_ADDR when rank 0 is here): a pod's IP,
  /// as pod names do not resolve outside the cluster's DNS. Empty: the name.
  std::string address;

  /// localhost, 127.0.0.1, ::1 or this machine's hostname: reached through the local transport.
  bool is_local() const;

  bool operator==(const HostEntry&) const = default;
};

using dtrain::HostKeyPolicy;  // launcher/base/host_key_policy.h, shared with the transport
using dtrain::SshClient;      // launcher/base/ssh_client.h, shared with the transport
using dtrain::to_string;
enum class Backend { auto_select, gloo, nccl };
/// How agents are started (`transport:`): auto (this machine through a pipe, other hosts over
/// SSH), ssh (the same), srun (one Slurm job step with a task on every host; needs an
/// allocation), or kubectl (`kubectl exec -i` into each pod; needs the kubernetes: block).
/// `hosts: slurm` makes srun the default, `hosts: kubernetes` kubectl.
enum class TransportKind { auto_select, ssh, srun, kubectl };
/// What a host whose software stack differs from the others' does to a run (`consistency:`):
/// strict refuses to start (a spare that differs is not used), warn starts with a warning (a
/// spare that differs is still not used), off compares nothing (the agents are not asked).
enum class Consistency { strict, warn, off };

struct SshSettings {
  std::string user;              ///< empty: the current user
  int port = 22;
  std::vector<std::string> identity;  ///< private key files, tried after ssh-agent
  std::string known_hosts;       ///< empty: ~/.ssh/known_hosts
  HostKeyPolicy host_key_policy = HostKeyPolicy::strict;
  Millis connect_timeout{10'000};
  int max_parallel = 64;
  std::string remote_dtrain;     ///< path of dtrain on the hosts; empty: provision
  SshClient client = SshClient::libssh2;  ///< ssh.client: built-in libssh2, or the system's ssh
  std::string config;            ///< ssh.config: `ssh -F` file (openssh); empty: ssh's own

  bool operator==(const SshSettings&) const = default;
};

/// kubernetes.job.kind: what dtrain creates for the pods.
enum class KubernetesJobKind {
  automatic,  ///< auto: a JobSet where the cluster's discovery lists the JobSet CRD, else a Job
  job,        ///< an Indexed Job and a headless Service
  jobset,     ///< a JobSet (jobset.x-k8s.io/v1alpha2) of one Indexed Job; its controller makes the Service
};
inline const char* to_string(KubernetesJobKind kind) {
  return kind == KubernetesJobKind::job ? "job" : kind == KubernetesJobKind::jobset ? "jobset" : "auto";
}

/// kubernetes.job: the pods dtrain creates for one run, as an Indexed Job (+ a headless Service)
/// or a JobSet of one such Job (`kind`), labelled dtrain.io/run=<run id>, deleted when the run
/// ends. Their containers only hold the slot (`command`); the agents are started in them with
/// kubectl exec.
struct KubernetesJobTemplate {
  KubernetesJobKind kind = KubernetesJobKind::automatic;  ///< kubernetes.job.kind
  std::string image;                                ///< kubernetes.job.image (required)
  int pods = 0;                                     ///< kubernetes.job.pods: hosts and spares together
  int gpus_per_pod = 0;                             ///< nvidia.com/gpu limit of each pod; 0: none
  std::map<std::string, std::string> node_selector; ///< kubernetes.job.node_selector
  /// Tolerations of node.kubernetes.io/not-ready and /unreachable: how long a pod stays bound to
  /// a node that stopped answering before Kubernetes evicts it (its default is 300 s).
  Millis not_ready_toleration{30'000};
  Millis unreachable_toleration{30'000};
  std::vector<std::string> command{"sleep", "infinity"};  ///< the slot holder

  bool operator==(const KubernetesJobTemplate&) const = default;
};

/// `hosts: kubernetes` and the kubernetes: block (docs/kubernetes.md): the hosts are pods, found by
/// label selector or created from `job`, reached with `kubectl exec`, watched for loss. kubectl
/// reads the user's kubeconfig itself: no credential ever passes through dtrain.
struct KubernetesSettings {
  bool enabled = false;          ///< hosts: kubernetes, or transport: kubectl with a host list
  std::string namespace_name;    ///< kubernetes.namespace; empty: the context's own
  std::string selector;          ///< kubernetes.selector: label selector of existing pods
  std::optional<KubernetesJobTemplate> job;  ///< kubernetes.job: pods dtrain creates instead
  std::string container;         ///< kubernetes.container; empty: each pod's first container
  std::string context;           ///< kubernetes.context; empty: the kubeconfig's current one
  std::string kubeconfig;        ///< kubernetes.kubeconfig; empty: kubectl's ($KUBECONFIG, ~/.kube/config)
  std::string kubectl = "kubectl";  ///< kubernetes.kubectl: the client to run (PATH lookup)
  int spares = 0;                ///< kubernetes.spares: the last N pods (by index, then name) are spares
  Millis pod_timeout{300'000};   ///< kubernetes.pod_timeout: how long created pods may take to run

  bool operator==(const KubernetesSettings&) const = default;
};

struct WorkerSettings {
  std::vector<std::string> command;           ///< argv, no shell; argv[0] looked up in PATH
  std::string workdir;                        ///< empty: the directory `dtrain submit` ran in
  /// The workers' variables: the env_file's, worker.env's over them, and worker.pass_env's.
  std::map<std::string, std::string> env;
  std::string env_file;                       ///< KEY=VALUE lines, resolved relative to the spec
  /// Every name the env_file defines, sorted. spec.yaml keeps these and the path, never the
  /// values: a resume reads the file again (and warns when its names changed).
  std::vector<std::string> env_file_names;
  /// The names in `env` whose value is the env_file's (worker.env does not set them), sorted.
  std::vector<std::string> env_from_file;
  /// worker.pass_env: names whose values come from dtrain's own environment (at submit, and again
  /// at resume), sorted. spec.yaml lists here every worker.env name that looks_secret, so their
  /// values are never written to the run directory.
  std::vector<std::string> pass_env;

  /// The values that must not be printed or written: those of names that looks_secret and of
  /// pass_env (the user kept them out of the spec).
  std::vector<std::string> secret_values() const;
  Backend backend = Backend::auto_select;
  /// worker.instrument: put dtrain's Python bootstrap first on the workers' PYTHONPATH (beats
  /// from torch optimizer steps, error records for uncaught exceptions). off: PYTHONPATH as given.
  bool instrument = true;
  /// worker.pool: processes of an unmodified script kept started up to just before the script
  /// runs (the bootstrap imported `imports`, then waits for its rank); every worker of a
  /// generation on that host takes one when one is ready. 0: none.
  int pool_per_host = 0;
  std::vector<std::string> pool_imports{"torch"};  ///< worker.pool.imports (default [torch])

  bool operator==(const WorkerSettings&) const = default;
};

struct Parallelism {
  int tensor = 1;
  int pipeline = 1;
  int data = 0;                  ///< 0: "auto", fill the hosts' slots

  bool operator==(const Parallelism&) const = default;
};

struct BatchSettings {
  int global = 0;                ///< 0: not set (then grad accumulation is 1)
  int micro = 0;

  bool operator==(const BatchSettings&) const = default;
};

struct ElasticSettings {
  int min_hosts = 0;             ///< 0: every host must stay (no shrinking)
  int max_restarts = 0;          ///< 0: the first failure ends the job
  Millis restart_window{3'600'000};
  int exclude_after = 2;
  /// Consecutive generations without progress that end the run as a crash loop.
  int crash_loop_after = 3;
  /// A generation whose progress cannot be known (no step reported, no checkpoint committed)
  /// counts as progress when it ran at least this long. 0 (`auto`, the default): 2 × the
  /// heartbeat.hang_timeout in force when the generation ended (launcher/supervisor/hang_timeouts.h).
  Millis progress_window{0};
  /// In-place recovery (docs/architecture.md §4): when one rank fails (exits, or hangs and is killed) and
  /// its host is still there, the other workers are not restarted: they abort their
  /// communicators, re-rendezvous under the next generation and take the newest completed step
  /// from a live data-parallel replica; only the failed rank's process is replaced. The workers
  /// must support it (dtrain-train does; PyTorch DDP scripts through dtrain_worker.InPlace).
  bool in_place = false;
  /// How long an in-place recovery may take, from the decision to every rank's communicator
  /// being up again; past it the generation is stopped and restarted the usual way (every
  /// worker, from the newest checkpoint). 0: 2 × heartbeat.timeout, at least 10 s.
  Millis in_place_timeout{0};
  /// Warm standbys: worker processes each agent keeps started but unassigned (the program
  /// loaded, a Python script's imports done), so that an in-place recovery's replacement on
  /// that host is a standby taking a rank instead of a new process. Refilled in the background.
  int standby_per_host = 0;

  bool operator==(const ElasticSettings&) const = default;
};

struct HeartbeatSettings {
  Millis interval{1'000};
  Millis timeout{10'000};
  /// 0 (`auto`, the default): set from the observed step time (launcher/supervisor/hang_timeouts.h).
  Millis hang_timeout{0};
  /// A rank in a checkpoint save (a beat with phase "checkpoint") is hung only after this long.
  /// 0: 10 minutes, or hang_timeout when that is longer. See checkpoint_hang_timeout().
  Millis checkpoint_timeout{0};

  bool hang_timeout_auto() const { return hang_timeout.count() == 0; }
  /// hang_timeout as the spec sets it, or auto's value before any step time is known: 1 minute,
  /// or 6 × timeout when that is longer (a hang is only told from a lost host when later).
  Millis initial_hang_timeout() const {
    if (!hang_timeout_auto()) return hang_timeout;
    return std::max(Millis(60'000), 6 * timeout);
  }
  /// checkpoint_timeout with its default applied (with an auto hang_timeout, before any save
  /// or step time is known).
  Millis checkpoint_hang_timeout() const {
    if (checkpoint_timeout.count() > 0) return checkpoint_timeout;
    return std::max(initial_hang_timeout(), Millis(600'000));
  }

  bool operator==(const HeartbeatSettings&) const = default;
};

struct CheckpointSettings {
  std::string dir;               ///< empty: <run dir>/checkpoints
  int interval_steps = 0;        ///< 0: no checkpoints
  int keep = 3;
  /// Inside a Slurm allocation: ask every worker for a checkpoint (ckpt.request) this long
  /// before the job's time limit. 0: only when Slurm signals USR1 (sbatch --signal=B:USR1@T).
  Millis before_walltime{0};
  /// Permission bits of every shard and manifest (the worker gets them as DTRAIN_CKPT_FILE_MODE):
  /// owner-only unless the spec asks for a group-readable mode such as 0640.
  int file_mode = 0600;

  bool operator==(const CheckpointSettings&) const = default;
};

/// What the run exposes for monitoring besides its run directory (metrics.prom is always written).
struct MetricsSettings {
  /// node_exporter's textfile collector directory: dtrain_<run-id>.prom is kept there too.
  std::string textfile_dir;
  /// "127.0.0.1:PORT" (or localhost, [::1]): serve GET /metrics there; empty: no listener.
  /// Loopback only: anything else is refused when the spec is read.
  std::string listen;
  /// A rank whose score (fastest rank's median step time / its own) falls below this is a straggler.
  double straggler_threshold = 0.75;
  /// How often metrics.prom (and the textfile) is rewritten while the run goes.
  Millis interval{5'000};

  bool operator==(const MetricsSettings&) const = default;
};

/// The run directory's rank logs (ranks/<rank>.log).
struct LogsSettings {
  /// A rank log that would pass this is rotated to <rank>.log.1 (one old file kept), so a rank
  /// uses at most about 2x this on disk. 0: "unlimited". 1 GiB by default: far more than anyone
  /// reads of one rank, yet a worker stuck printing in a loop cannot fill $DTRAIN_HOME.
  uint64_t max_bytes = 1ull << 30;

  bool operator==(const LogsSettings&) const = default;
};

/// scale: how the supervisor reaches many hosts (issue 32; man/dtrain-spec.5 SCALE). With a relay
/// tree, the supervisor connects to a first level of relays (job hosts, never spares) and each
/// relay starts and carries the agents of up to `fanout` other hosts over SSH.
enum class RelayTreeMode { auto_select, on, off };
/// scale.tree: auto builds a tree from this many hosts (hosts and spares, reached over SSH) on.
inline constexpr int kRelayTreeFromHosts = 256;
struct ScaleSettings {
  RelayTreeMode tree = RelayTreeMode::auto_select;
  int fanout = 0;  ///< hosts each relay reaches; 0: about √(hosts), which keeps both levels even
  bool operator==(const ScaleSettings&) const = default;
};

/// intent: what the job is for and what a failure may cost it, stated by the submitter (issue
/// 30): the platform's advice (`dtrain plan --advise`) and grading read it; a site can require it
/// per tenant ($DTRAIN_HOME/config.yaml intent.required_for). Absent: given == false.
struct IntentSettings {
  enum class Precision { fp32, tf32, bf16, fp16, fp8 };
  enum class Optimizer { adam, adamw, sgd, sgd_momentum, adafactor, none };
  enum class RecoveryMode { restart, in_place };
  bool given = false;
  double parameters = 0;                         ///< intent.model.parameters (7B = 7e9); 0: not said
  Precision precision = Precision::bf16;         ///< intent.model.precision: bytes per weight
  Optimizer optimizer = Optimizer::adamw;        ///< intent.model.optimizer: state per parameter
  uint64_t state_bytes = 0;                      ///< intent.model.state_bytes: total, when the user knows better
  double samples = 0, tokens = 0;                ///< intent.data: how much it trains on; 0: not said
  int64_t sequence_length = 0;                   ///< intent.data.sequence_length: tokens a sample; 0: not said
  Millis target_duration{0};                     ///< intent.target_duration; 0: not said
  uint64_t gpu_memory_bytes = 0;                 ///< intent.gpu_memory: per-GPU need; 0: not said
  Millis max_recovery{0};                        ///< intent.recovery.max_recovery; 0: not said
  int64_t max_lost_steps = 0;                    ///< intent.recovery.max_lost as "N steps"
  Millis max_lost_time{0};                       ///< intent.recovery.max_lost as a duration
  RecoveryMode mode = RecoveryMode::restart;     ///< intent.recovery.mode
  bool operator==(const IntentSettings&) const = default;
};

const char* to_string(IntentSettings::Precision precision);
const char* to_string(IntentSettings::Optimizer optimizer);  ///< sgd_momentum: "sgd-momentum"
const char* to_string(IntentSettings::RecoveryMode mode);    ///< in_place: "in-place"
/// "80GB" (10^9), "80GiB" (2^30), "512MB", "1.5TB" or a number of bytes; none when it is not one
/// (spec_intent.cpp: intent sizes, and the hardware `dtrain plan --advise` is told about).
std::optional<double> parse_byte_size(const std::string& text);
/// Bytes a weight takes in `precision` (fp32/tf32 4, bf16/fp16 2, fp8 1).
int bytes_per_weight(IntentSettings::Precision precision);

/// health: the checks each agent makes of its host before it takes part (issue 29): at hello,
/// before a re-rendezvous takes a host in, and after a failure blamed on a host. A host that
/// fails one is left out (a spare or a shrink takes its place) and quarantined in the registry,
/// so later runs leave it out too. The site's defaults for command and diagnose are
/// $DTRAIN_HOME/config.yaml health:.
struct HealthSettings {
  bool enabled = true;               ///< health.enabled: false runs no checks
  std::string command;               ///< health.command: the site's own check (sh -c); exit 1 keeps the host out
  Millis command_timeout{30'000};    ///< past it the command is killed: a warning, the host goes in
  std::string diagnose;              ///< health.diagnose: run before a host blamed for a failure returns
  Millis diagnose_timeout{300'000};
  uint64_t leftover_gpu_memory_mb = 512;  ///< health.leftover_gpu_memory: others' memory per GPU allowed
  Millis reclaim_wait{30'000};       ///< health.reclaim_wait: how long to wait for it to be freed
  Millis write_timeout{5'000};       ///< health.write_timeout: the checkpoint directory's write + fsync
  uint64_t min_free_mb = 1024;       ///< health.min_free: free space in the checkpoint directory
  /// health.quarantine: the root cause of `after` failures within `window` is quarantined, as is
  /// a host that fails a check; for `duration`, then on probation (the next check decides).
  int quarantine_after = 3;
  Millis quarantine_window{24LL * 3600 * 1000};
  Millis quarantine_duration{7LL * 24 * 3600 * 1000};
  bool operator==(const HealthSettings&) const = default;
};

struct JobSpec {
  int version = 1;
  std::string name;
  std::string tenant;
  std::vector<HostEntry> hosts;  ///< resolved, in order; empty spec hosts → one "localhost"
  std::vector<HostEntry> spares;
  int slots_per_host = 1;
  SshSettings ssh;
  TransportKind transport = TransportKind::auto_select;
  /// hosts: kubernetes: where the pods come from. With `hosts: kubernetes` the loader leaves
  /// `hosts` empty; launcher/hosts (kubernetes_hosts.h) fills them from the pods at submit.
  KubernetesSettings kubernetes;
  /// Before the first generation every host's software stack (OS, kernel, GPU driver, CUDA,
  /// NCCL, Python, torch, image, the worker command's files) is compared with the others'.
  Consistency consistency = Consistency::strict;
  WorkerSettings worker;
  Parallelism parallelism;
  BatchSettings batch;
  ElasticSettings elastic;
  HeartbeatSettings heartbeat;
  CheckpointSettings checkpoint;
  MetricsSettings metrics;
  LogsSettings logs;
  ScaleSettings scale;
  IntentSettings intent;
  HealthSettings health;
  Millis stop_grace{10'000};
  /// A preemption (SIGTERM to dtrain, `dtrain stop --checkpoint`): how long to wait for the
  /// checkpoint asked of every rank before stopping, and the SIGTERM-to-SIGKILL grace of workers
  /// that could not be asked (unmodified scripts), which save in their own SIGTERM handler.
  Millis preempt_grace{60'000};

  std::string source_path;       ///< the spec file, for messages; "" when built in code

  bool operator==(const JobSpec&) const = default;

  /// elastic.in_place_timeout, or its default: 2 × heartbeat.timeout, at least 10 s.
  Millis in_place_timeout() const {
    if (elastic.in_place_timeout.count() > 0) return elastic.in_place_timeout;
    return std::max(Millis(10'000), 2 * heartbeat.timeout);
  }
};

const char* to_string(Backend backend);
const char* to_string(TransportKind transport);
const char* to_string(Consistency consistency);

}  // namespace dtrain::spec
