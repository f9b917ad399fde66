#pragma once
// libdtrain_worker: what a training process needs to live under dtrain (docs/architecture.md §3).
//
//   auto worker = dtrain::worker::Worker::from_env();      // reads the contract, says hello
//   auto comm = (*worker)->connect(std::chrono::seconds(60));  // Gloo or NCCL, by DTRAIN_BACKEND
//   dtrain::worker::Checkpointer ckpt(**worker, options);
//   for (...) { ...; (*comm)->allreduce_sum(grads, n, timeout); (*worker)->beat(step, metrics); }
//
// This is the library's only public header. It depends on std and worker/contract only: the
// worker side never links the launcher (errors are the contract's Result, worker/contract/result.h).

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "worker/contract/beat_metrics.h"
#include "worker/contract/result.h"

namespace dtrain::worker {

using Millis = std::chrono::milliseconds;

// --- errors as values ----------------------------------------------------------------------

// One Result/Status/Error for the worker and the launcher (worker/contract/result.h); the
// worker writes `Error{message}` and reads only `error().message`.
using dtrain::Error;
using dtrain::Result;
using dtrain::Status;

// --- the contract as values ------------------------------------------------------------------

/// Where this process sits in the job (RANK, WORLD_SIZE, DTRAIN_{DP,TP,PP}_{RANK,SIZE}, ...).
struct Topology {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  int dp_rank = 0;
  int dp_size = 1;
  int tp_rank = 0;
  int tp_size = 1;
  int pp_rank = 0;
  int pp_size = 1;
};

/// The rest of the worker environment. Zero/empty means "not set by the launcher".
struct Settings {
  std::string run_id;
  int generation = 0;
  std::string backend;            ///< DTRAIN_BACKEND: "gloo", "nccl" or "" (choose)
  std::string master_addr;        ///< MASTER_ADDR: rank 0's host; picks Gloo's interface
  int master_port = 0;
  int global_batch = 0;           ///< DTRAIN_GLOBAL_BATCH
  int micro_batch = 0;            ///< DTRAIN_MICRO_BATCH
  int grad_accum = 0;             ///< DTRAIN_GRAD_ACCUM
  std::string ckpt_dir;           ///< DTRAIN_CKPT_DIR; "" = no checkpoints
  int ckpt_interval = 0;          ///< DTRAIN_CKPT_INTERVAL; 0 = no checkpoints
  int ckpt_keep = 3;              ///< DTRAIN_CKPT_KEEP
  int ckpt_file_mode = 0600;      ///< DTRAIN_CKPT_FILE_MODE (octal text); owner-only by default
  int64_t resume_step = -1;       ///< DTRAIN_RESUME_STEP; -1 = the latest complete one
  int heartbeat_interval_ms = 1000;  ///< DTRAIN_HEARTBEAT_INTERVAL_MS
  int fault_ckpt_delay_ms = 0;    ///< DTRAIN_FAULT_CKPT_DELAY_MS: sleep before writing shards
  // In-place recovery (see Worker::adopt_new_generation).
  bool in_place = false;          ///< DTRAIN_IN_PLACE=1: survive a peer's failure, do not exit
  int in_place_timeout_ms = 30'000;  ///< DTRAIN_IN_PLACE_TIMEOUT_MS: wait for gen.changed, then rejoin
  bool join_live = false;         ///< DTRAIN_JOIN_LIVE=1: a replacement; state comes from a live replica
};

/// What one training step reports (worker/contract/beat_metrics.h). Unset fields are left off
/// the wire.
using Metrics = contract::BeatMetrics;

// --- key-value store ---------------------------------------------------------------------------

/// The generation-scoped store the supervisor serves (through the agent). An interface so that
/// standalone runs and tests can use an in-process one (InProcessKv) instead of the socket.
/// Thread-safe: an asynchronous checkpoint may use it while the training loop beats.
class KvClient {
 public:
  virtual ~KvClient() = default;
  virtual Status set(const std::string& key, const std::string& value) = 0;
  /// The value, or nullopt when the key is not set (does not wait).
  virtual Result<std::optional<std::string>> get(const std::string& key) = 0;
  /// Blocks until every key is set, then returns their values in order; an error names the
  /// missing keys after `timeout`.
  virtual Result<std::vector<std::string>> wait(const std::vector<std::string>& keys,
                                                Millis timeout) = 0;
  /// gen.check: is this worker's generation still the current one? (false = do not commit)
  virtual Result<bool> generation_is_current() = 0;
};

/// A KvClient in this process: standalone mode, and tests that run several "ranks" as threads.
class InProcessKv final : public KvClient {
 public:
  InProcessKv();
  ~InProcessKv() override;
  Status set(const std::string& key, const std::string& value) override;
  Result<std::optional<std::string>> get(const std::string& key) override;
  Result<std::vector<std::string>> wait(const std::vector<std::string>& keys, Millis timeout) override;
  Result<bool> generation_is_current() override;
  /// Simulates the supervisor starting a newer generation: this client's writes and commits
  /// are refused from then on, as they would be for a stale worker.
  void end_generation();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// --- collectives ---------------------------------------------------------------------------------

/// One interface, several back ends (Gloo over TCP; NCCL when built with CUDA; a trivial one
/// for a world of one). Every operation has a timeout; a dead or stopped peer becomes an Error
/// naming the operation and the peers, never a hang. After an error the communicator is
/// unusable (collectives cannot be resumed half-way): the caller should exit, or, with
/// DTRAIN_IN_PLACE=1, destroy it and rejoin (Worker::adopt_new_generation).
class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual const char* backend() const = 0;  ///< "gloo", "nccl", "solo"
  virtual int rank() const = 0;
  virtual int size() const = 0;
  /// In-place sum across ranks. For NCCL, `data` must be device memory.
  virtual Status allreduce_sum(float* data, size_t count, Millis timeout) = 0;
  virtual Status allreduce_sum(double* data, size_t count, Millis timeout) = 0;
  /// Copies `bytes` at `data` from `root` to every rank.
  virtual Status broadcast(void* data, size_t bytes, int root, Millis timeout) = 0;
  virtual Status barrier(Millis timeout) = 0;
  /// Point to point: sends `send_bytes` at `send_data` to rank `send_to` and receives
  /// `recv_bytes` into `recv_data` from rank `recv_from`. Both are posted before either is
  /// waited for, so two neighbours that exchange in both directions (a pipeline's activations
  /// one way, gradients the other) cannot deadlock. kNoPeer skips that half. A rank's n-th send
  /// to a peer is that peer's n-th receive from it; their byte counts must agree. For NCCL,
  /// both buffers must be device memory.
  virtual Status send_recv(const void* send_data, size_t send_bytes, int send_to, void* recv_data,
                           size_t recv_bytes, int recv_from, Millis timeout) = 0;
  Status send(const void* data, size_t bytes, int to, Millis timeout) {
    return send_recv(data, bytes, to, nullptr, 0, kNoPeer, timeout);
  }
  Status recv(void* data, size_t bytes, int from, Millis timeout) {
    return send_recv(nullptr, 0, kNoPeer, data, bytes, from, timeout);
  }
  /// Tears the communicator down without waiting for peers (NCCL: ncclCommAbort; Gloo: a later
  /// collective fails at once, and the destructor closes the connections); used on stop and
  /// when a rank leaves a generation in place. Only the destructor may follow.
  virtual void abort() {}

  static constexpr int kNoPeer = -1;
};

/// A rank's communicators for hybrid parallelism, one per group it belongs to. In each group a
/// rank's index is its coordinate on that axis: tp_rank in `tensor`, pp_rank in `pipeline`
/// (so the pipeline neighbours are pp_rank - 1 and pp_rank + 1), dp_rank in `data`. A group of
/// one is a communicator whose collectives do nothing.
struct ParallelGroups {
  std::unique_ptr<Communicator> tensor;    ///< same (pp, dp): the layers' split halves
  std::unique_ptr<Communicator> pipeline;  ///< same (tp, dp): the stages of one replica
  std::unique_ptr<Communicator> data;      ///< same (tp, pp): the replicas of one shard
  std::vector<int> tensor_ranks;           ///< global ranks of each group, by index
  std::vector<int> pipeline_ranks;
  std::vector<int> data_ranks;
};

// --- the worker ----------------------------------------------------------------------------------

class AgentConnection;
class CommInterrupts;
class AgentKv;
struct CommGroup;

/// One training process's link to dtrain: identity, heartbeats, the KV store, collectives.
class Worker {
 public:
  /// Reads the worker contract and connects to $DTRAIN_AGENT_SOCKET, sending hello {rank, gen,
  /// pid}. Outside dtrain (neither DTRAIN_AGENT_SOCKET nor RANK set) this is an error that says
  /// how to run under dtrain, unless `allow_standalone` or DTRAIN_STANDALONE=1: then it is
  /// standalone() with the DTRAIN_* settings that are set. A warm standby (DTRAIN_STANDBY=1)
  /// first says hello {standby} and blocks until the agent assigns it a rank (no time limit),
  /// sets the assign's env in this process (so anything read from the environment afterwards is
  /// that rank's) and goes on as above on the same connection.
  static Result<std::unique_ptr<Worker>> from_env(bool allow_standalone = false);

  /// A world of one with an in-process KV store; checkpoints still work. For debugging.
  static std::unique_ptr<Worker> standalone(Settings settings = {});

  /// A worker with the given identity talking to `kv` and sending its wire lines nowhere but
  /// sent_lines(). For tests that run several ranks as threads over one InProcessKv.
  static std::unique_ptr<Worker> in_process(Topology topology, Settings settings,
                                            std::shared_ptr<KvClient> kv);

  ~Worker();
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  const Topology& topology() const { return topology_; }
  const Settings& settings() const { return settings_; }

  /// Records progress. Cheap: call it every step. On the wire at most once per
  /// DTRAIN_HEARTBEAT_INTERVAL_MS, except the first beat and beats with `final_step`, which are
  /// always sent; the newest unsent beat is flushed by bye().
  void beat(int64_t step, const Metrics& metrics, bool final_step = false);

  /// Says at once (not rate-limited) that this rank enters (true) or leaves (false) a
  /// synchronous checkpoint save, as a beat with the newest step and "phase" (wire.h): while
  /// it saves, the supervisor allows heartbeat.checkpoint_timeout instead of hang_timeout.
  /// Checkpointer::save calls it; nothing is sent before the first beat (no step to watch yet).
  void set_checkpoint_phase(bool saving);

  KvClient& kv() { return *kv_; }

  /// Connects the collectives of this generation: Gloo or NCCL by DTRAIN_BACKEND ("" = NCCL when
  /// built with CUDA and a GPU is visible, else Gloo); a world of one needs no network. On
  /// success it reports comm.ready with the time it took (report_comm_ready), so callers of
  /// connect() need do nothing more.
  Result<std::unique_ptr<Communicator>> connect(Millis timeout);

  /// Connects this rank's tensor-, pipeline- and data-parallel groups instead of one world
  /// communicator (same back-end choice as connect()). Membership comes from the store: every
  /// rank publishes its (tp, pp, dp) coordinates, so the groups follow the launcher's plan
  /// whatever its rank order. Reports comm.ready once, when all three are up.
  Result<ParallelGroups> connect_groups(Millis timeout);

  /// comm.ready {ms}: this rank's communicator is initialised and the first collective could
  /// run; `init_ms` is how long that took. The supervisor ends the recovery's "rendezvous" phase
  /// when every rank has said it. Only for programs that build their own communicator: connect()
  /// calls it. Independent of beat(): it never delays or replaces a beat. Sent once per
  /// generation: a second call in the same generation sends nothing.
  void report_comm_ready(int64_t init_ms);

  /// ckpt.committed {step, bytes, ms}: the supervisor turns it into a checkpoint.committed event.
  void report_checkpoint_committed(int64_t step, int64_t bytes, int64_t ms);
  /// ckpt.rejected {step, reason}: a checkpoint that resume skipped (checkpoint.rejected event).
  void report_checkpoint_rejected(int64_t step, const std::string& reason);

  /// ckpt.request (wire.h): true once, at the first call with `step` >= the step the supervisor
  /// named (Slurm's time limit is near: SIGUSR1 or checkpoint.before_walltime). Every rank gets
  /// the same step; but a rank may hear it late (after that step), so ranks that save together
  /// must agree on the step among themselves (the reference trainer adds the answer to its
  /// gradient allreduce) and then call checkpoint_request_served(). Cheap (no I/O): call every step.
  bool checkpoint_requested(int64_t step);
  /// The ranks agreed to save `step` for a checkpoint request: a request this rank hears only
  /// now (for that step or an earlier one) is served already and is not taken again.
  void checkpoint_request_served(int64_t step);

  // --- in-place recovery (DTRAIN_IN_PLACE=1; wire.h gen.changed) ---------------------------
  //
  // When a rank fails, the supervisor moves the store to generation G+1 and the agent sends
  // gen.changed to every surviving worker instead of restarting it. A survivor then:
  //   1. notices: a collective fails (a dead peer's socket closes), or generation_change()
  //      says so at the top of a step;
  //   2. destroys every communicator (for Gloo that closes its sockets, which is what makes the
  //      peers still blocked in a collective with it fail too) and waits for a background
  //      checkpoint save (Checkpointer::wait: its commit is refused, see below);
  //   3. adopt_new_generation(timeout);
  //   4. connect() / connect_groups() again: G+1's store is empty, so the same keys rendezvous
  //      afresh, and comm.ready is reported for G+1;
  //   5. agrees with the other ranks on the state (the program's business; dtrain-train: its
  //      worker/trainer/live_recovery.h) and carries on.
  // The replacement rank starts with DTRAIN_JOIN_LIVE=1 in generation G+1 and skips step 3.
  // A checkpoint save interrupted by the failure does not commit: gen.check answers "not
  // current" to a worker whose generation is not the store's, and after gen.changed the store's
  // is G+1 while this worker's is still G until it adopts.

  /// A generation newer than settings().generation that was announced (gen.changed from the
  /// agent, or announce_generation() in process), if any. Cheap (a mutex, no I/O): call it at
  /// the top of every step.
  std::optional<int> generation_change() const;

  /// Waits up to `timeout` for a newer generation to be announced, then makes it this worker's:
  /// settings().generation = G, the store is G's (in process: the one given to
  /// announce_generation), and the per-generation state is reset: the beat rate limit (the
  /// first step beat of G goes out at once) and a beat not yet sent (a step of the old
  /// generation must not be read as progress in G), the checkpoint phase (G starts in "train"),
  /// and comm.ready (reported again by the next connect). A pending ckpt.request is kept: it
  /// names a step, not a generation. Call it only with every communicator destroyed and no
  /// checkpoint save in flight. Returns G; an error when no announcement came in time (the
  /// worker should then exit non-zero: the supervisor falls back to a full restart).
  Result<int> adopt_new_generation(Millis timeout);

  /// In-process workers (tests): announces generation `generation`, served by `store` (a fresh
  /// one, as the supervisor's store is empty in a new generation), as the agent's gen.changed
  /// would. Thread-safe: the "supervisor" thread calls it while the rank's thread trains.
  /// Ignored for workers connected to an agent.
  void announce_generation(int generation, std::shared_ptr<KvClient> store);

  /// Says goodbye (flushing the newest beat first). Called by the destructor with "exit" if not
  /// called before.
  void bye(const std::string& reason);

  /// In-process workers: every line this worker would have sent, in order (for tests).
  std::vector<std::string> sent_lines() const;

 private:
  Worker() = default;
  void send_line(const std::string& line);
  Result<std::unique_ptr<Communicator>> connect_group(const CommGroup& group, Millis timeout);

  Topology topology_;
  Settings settings_;
  bool said_bye_ = false;
  std::shared_ptr<KvClient> kv_;
  std::shared_ptr<AgentConnection> connection_;  // null when in process
  AgentKv* agent_kv_ = nullptr;                  // kv_ when connected to an agent
  struct Generations;
  std::unique_ptr<Generations> generations_;
  // The communicators to interrupt when a newer generation is announced (connect_group
  // registers them; the announcement may come on the agent connection's thread).
  std::shared_ptr<CommInterrupts> interrupts_;
  struct Beats;
  std::unique_ptr<Beats> beats_;
  struct Recorded;
  std::unique_ptr<Recorded> recorded_;
};

// --- checkpoints ---------------------------------------------------------------------------------

/// CRC32C (Castagnoli), as in iSCSI/ext4: crc32c("123456789") == 0xE3069283. `crc` chains calls.
uint32_t crc32c(const void* data, size_t size, uint32_t crc = 0);

/// A checkpoint that discovery passed over, and why ("shard-tp0-pp0.bin: CRC mismatch ...").
struct SkippedCheckpoint {
  int64_t step = 0;
  std::string reason;
};

/// What latest_complete() found.
struct CheckpointScan {
  std::optional<int64_t> latest;          ///< highest step that verifies; nullopt: none
  std::vector<SkippedCheckpoint> skipped; ///< newer steps that did not verify, newest first
};

/// Scans `dir` for step-<N> directories, newest first, and returns the first whose MANIFEST.json
/// and every shard (header, size, CRC32C) verify. A missing `dir` is "no checkpoint", not an error.
CheckpointScan latest_complete(const std::string& dir);

/// Verifies one step's manifest and all of its shards.
Status verify_checkpoint(const std::string& dir, int64_t step);

/// Reads and verifies the payload of one shard of a committed step.
Result<std::string> read_shard(const std::string& dir, int64_t step, int tp_rank, int pp_rank);

struct CheckpointOptions {
  std::string dir;             ///< required
  int keep = 3;                ///< newest complete steps to keep (>= 1)
  bool async = false;          ///< write in the background; the next save() waits for it
  int fault_delay_ms = 0;      ///< sleep before writing shards (slow-storage drill)
  int file_mode = 0600;        ///< shards and manifests, exactly (the umask does not narrow it)
  Millis handshake_timeout{std::chrono::minutes(5)};  ///< rank 0 waiting for every shard
};

/// Options from the worker's settings (dir, keep, file mode, fault delay).
CheckpointOptions checkpoint_options(const Settings& settings);

/// Writes and restores checkpoints exactly as docs/architecture.md §3 says: one shard per (tp, pp)
/// coordinate written by its DP rank 0 (temp name, fsync, rename, directory fsync); global rank 0
/// waits (through the KV store) until every shard of the step is in place, asks the store
/// whether its generation is still current, then writes MANIFEST.json last and prunes to `keep`.
class Checkpointer {
 public:
  Checkpointer(Worker& worker, CheckpointOptions options);
  ~Checkpointer();  ///< waits for a background save

  /// Collective: every rank calls it with the same step and its own state (`payload`, which is
  /// the in-memory snapshot). Synchronous unless options.async; then it returns after taking the
  /// snapshot and the previous save's error, if any, is returned by this call or wait().
  Status save(int64_t step, std::string payload);

  /// Waits for a background save and returns its outcome.
  Status wait();

  struct Restored {
    int64_t step = 0;
    std::string payload;  ///< this rank's shard
  };
  /// `resume_step` < 0: the latest complete step (each skipped one is printed on stderr as
  /// "dtrain: checkpoint step-N rejected: why" and, by rank 0, sent as ckpt.rejected);
  /// >= 0: exactly that step, an error if it does not verify. nullopt: nothing to resume.
  Result<std::optional<Restored>> restore(int64_t resume_step);

 private:
  Status save_now(int64_t step, const std::string& payload);
  Status commit_manifest(int64_t step, int64_t started_ms);

  Worker& worker_;
  CheckpointOptions options_;
  struct Background;
  std::unique_ptr<Background> background_;
};

}  // namespace dtrain::worker
