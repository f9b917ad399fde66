#pragma once
// The worker environment: the single source of the variable names dtrain sets for every worker
// (docs/architecture.md §3). torchrun-compatible names first, so an unmodified PyTorch DDP script runs
// under dtrain; then dtrain's own.

namespace dtrain::contract::env {

// --- torchrun-compatible -------------------------------------------------------------------
inline constexpr const char* kRank = "RANK";                       ///< global rank, 0..WORLD_SIZE-1
inline constexpr const char* kLocalRank = "LOCAL_RANK";            ///< rank within this host
inline constexpr const char* kWorldSize = "WORLD_SIZE";
inline constexpr const char* kLocalWorldSize = "LOCAL_WORLD_SIZE"; ///< workers on this host
inline constexpr const char* kGroupRank = "GROUP_RANK";            ///< index of this host in the plan
inline constexpr const char* kGroupWorldSize = "GROUP_WORLD_SIZE"; ///< number of hosts in the plan
inline constexpr const char* kRoleRank = "ROLE_RANK";
inline constexpr const char* kRoleWorldSize = "ROLE_WORLD_SIZE";
inline constexpr const char* kRoleName = "ROLE_NAME";              ///< "default" unless worker.env sets it
inline constexpr const char* kMasterAddr = "MASTER_ADDR";          ///< rank 0's host
inline constexpr const char* kMasterPort = "MASTER_PORT";          ///< free port, fresh each generation
inline constexpr const char* kRestartCount = "TORCHELASTIC_RESTART_COUNT";
inline constexpr const char* kMaxRestarts = "TORCHELASTIC_MAX_RESTARTS";
inline constexpr const char* kRunIdTorch = "TORCHELASTIC_RUN_ID";
inline constexpr const char* kOmpNumThreads = "OMP_NUM_THREADS";   ///< "1" unless the user set it
/// The physical slots (GPU indices) the worker's host uses, in LOCAL_RANK order ("0,2" with
/// only_slots [0, 2]), so that cuda:LOCAL_RANK is the worker's own GPU, as under torchrun with
/// one visible device per local rank. Set when the backend is nccl or the host reported GPUs;
/// never when the spec's worker.env sets it (then the user's value is left as it is).
inline constexpr const char* kCudaVisibleDevices = "CUDA_VISIBLE_DEVICES";

// --- dtrain's own ------------------------------------------------------------------------------
inline constexpr const char* kRunId = "DTRAIN_RUN_ID";
inline constexpr const char* kGeneration = "DTRAIN_GENERATION";
inline constexpr const char* kAgentSocket = "DTRAIN_AGENT_SOCKET";   ///< unix socket of the worker protocol
inline constexpr const char* kBackend = "DTRAIN_BACKEND";            ///< "gloo" or "nccl"
/// The worker's physical slot: its GPU index as nvidia-smi numbers it (only_slots[LOCAL_RANK]
/// when the host lists only_slots, else LOCAL_RANK). Set on every host, CPU-only ones too. The
/// CUDA ordinal inside the process is its position in CUDA_VISIBLE_DEVICES (= LOCAL_RANK when
/// dtrain set that variable).
inline constexpr const char* kDevice = "DTRAIN_DEVICE";
inline constexpr const char* kDpRank = "DTRAIN_DP_RANK";
inline constexpr const char* kDpSize = "DTRAIN_DP_SIZE";
inline constexpr const char* kTpRank = "DTRAIN_TP_RANK";
inline constexpr const char* kTpSize = "DTRAIN_TP_SIZE";
inline constexpr const char* kPpRank = "DTRAIN_PP_RANK";
inline constexpr const char* kPpSize = "DTRAIN_PP_SIZE";
inline constexpr const char* kGlobalBatch = "DTRAIN_GLOBAL_BATCH";
inline constexpr const char* kMicroBatch = "DTRAIN_MICRO_BATCH";
inline constexpr const char* kGradAccum = "DTRAIN_GRAD_ACCUM";       ///< micro-batches per step per DP rank
inline constexpr const char* kCkptDir = "DTRAIN_CKPT_DIR";
inline constexpr const char* kCkptInterval = "DTRAIN_CKPT_INTERVAL";  ///< steps between checkpoints
inline constexpr const char* kCkptKeep = "DTRAIN_CKPT_KEEP";          ///< newest steps to keep
/// Octal mode of checkpoint shards and manifests (spec checkpoint.file_mode): "0600" unless the
/// spec asks for a group-readable one such as "0640". Set for every worker; a PyTorch script
/// that saves its own checkpoints may apply it (os.chmod) too.
inline constexpr const char* kCkptFileMode = "DTRAIN_CKPT_FILE_MODE";
inline constexpr const char* kResumeStep = "DTRAIN_RESUME_STEP";      ///< -1: discover the latest yourself
inline constexpr const char* kHeartbeatIntervalMs = "DTRAIN_HEARTBEAT_INTERVAL_MS";

// In-place recovery (spec elastic.in_place; docs/architecture.md §4). Set only for jobs that opted in.
/// "1": when a collective fails because a peer died, do not exit: wait for the agent's
/// gen.changed (wire.h), tear the communicators down, re-rendezvous under the new generation and
/// take the newest completed step's state from a live data-parallel replica.
inline constexpr const char* kInPlace = "DTRAIN_IN_PLACE";
/// How long a survivor waits for gen.changed after a collective failed, and for the rejoin
/// (store rendezvous and state transfer) after it; past it the worker exits non-zero and the
/// supervisor falls back to a full restart.
inline constexpr const char* kInPlaceTimeoutMs = "DTRAIN_IN_PLACE_TIMEOUT_MS";
/// "1": this process replaces a failed rank of a live generation: it takes its state from a
/// surviving data-parallel replica by broadcast, not from a checkpoint on disk.
inline constexpr const char* kJoinLive = "DTRAIN_JOIN_LIVE";

/// "1": a warm standby (elastic.standby_per_host): connect to the agent, say hello {standby:
/// true, pid} and wait for assign {gen, rank, env} (wire.h) before reading the rest of the
/// contract; until then no rank's variables are set.
inline constexpr const char* kStandby = "DTRAIN_STANDBY";
/// DTRAIN_STANDBY's value for a pool process of an unmodified script (spec worker.pool): the
/// bootstrap (sitecustomize) imports DTRAIN_STANDBY_IMPORTS, says hello {standby}, waits for the
/// assign, takes its env, pops both variables and says hello {rank, gen, pid} on that connection;
/// only then does Python run the script. Nothing of CUDA is touched before.
inline constexpr const char* kStandbyInBootstrap = "bootstrap";
/// Comma-separated module names the pool's bootstrap imports before it waits (worker.pool.imports).
inline constexpr const char* kStandbyImports = "DTRAIN_STANDBY_IMPORTS";

/// "1": run alone outside dtrain (world size 1, in-process store) — for debugging a trainer.
inline constexpr const char* kStandalone = "DTRAIN_STANDALONE";

// --- fault hooks used by `dtrain drill` ----------------------------------------------------------
inline constexpr const char* kFaultCkptDelayMs = "DTRAIN_FAULT_CKPT_DELAY_MS";  ///< slow-storage drill

}  // namespace dtrain::contract::env
