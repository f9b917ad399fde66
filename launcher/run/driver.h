#pragma once
// RunDriver, the supervisor's event loop (internal to launcher/run). Its parts, one file each:
//   driver.cpp           the loop: waiting, pumping links, signals, silences and pings, the end
//   driver_routing.cpp   agent frames → typed messages → supervisor Events (one handler per type)
//   driver_actions.cpp   supervisor Actions → frames to agents (start/stop generations, samples)
//   driver_snapshots.cpp state.json, metrics.jsonl and the console status, built from the supervisor
//   driver_metrics.cpp   task metrics: generation.stepped, stragglers, goodput, metrics.prom / /metrics
//   run_summary.cpp      the end-of-run summary
//   run_recorder.*       where records go (events.jsonl, logs, files, console), off the loop
//   agent_transports.*   which transport reaches which host
//   submit_flow.cpp, resume_flow.cpp   `dtrain submit` and `dtrain resume` around a driver
// Everything that happens becomes a supervisor Event; everything the supervisor decides comes
// back as Actions that the driver carries out. One thread, one poll().

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "launcher/base/clock.h"
#include "launcher/base/fd.h"
#include "launcher/plan/rank_plan.h"
#include "launcher/proto/agent_frame_parser.h"
#include "launcher/proto/agent_messages.h"
#include "launcher/proto/worker_messages.h"
#include "launcher/run/agent_link.h"
#include "launcher/run/agent_transports.h"
#include "launcher/run/control_socket.h"
#include "launcher/run/driver_metrics.h"
#include "launcher/run/run_driver.h"
#include "launcher/run/run_recorder.h"
#include "launcher/run/worker_env.h"
#include "launcher/runlog/run_directory.h"
#include "launcher/runlog/run_lock.h"
#include "launcher/store/kv_store.h"
#include "launcher/supervisor/supervisor.h"

namespace dtrain::run {

/// A sender whose messages could not be parsed this many times is treated as failed (a worker:
/// its rank fails; an agent: its host is lost). One bad message is only an event.
constexpr int kMaxProtocolErrorsPerSender = 100;

/// Per-rank progress the supervisor does not need but status and metrics do.
struct RankMetrics {
  int64_t last_beat_wall_ms = 0;
  std::optional<double> loss;
  std::optional<double> step_ms;
  std::optional<double> comm_ms, data_ms;  ///< time in collectives, waiting for input (when reported)
  std::optional<int64_t> samples;          ///< samples in the step (when reported)
  bool speaks_protocol = false;
};

class RunDriver {
 public:
  RunDriver(spec::JobSpec spec, plan::RankPlan plan, RunDirectory run, EventLog events, std::string dtrain_exe,
            bool detached, Console console, const DriverSeams& seams);

  /// Continue a run whose supervisor died: call before run().
  void resume_from(const supervisor::ResumeFrom& from, int64_t submitted_wall_ms);

  /// Runs the job to its end; the process exit code.
  int run();

 private:
  // ---- the loop (driver.cpp)
  void install_signal_handlers();
  void start_agents();
  void shut_down_agents();
  /// Moves bytes on each of `links` and routes the frames that arrived.
  void pump_links(const std::vector<AgentLink*>& links);
  void handle_signals();
  /// Asks every worker for a checkpoint at one step all ranks reach (ckpt.request): SIGUSR1
  /// from Slurm before its time limit, or checkpoint.before_walltime (driver_checkpoint_request.cpp).
  void request_checkpoints(const std::string& reason);
  /// checkpoint.before_walltime: looks the Slurm job's time left up once, asks when it is due.
  void check_walltime();
  ControlReply handle_control(const ControlRequest& request);
  void check_silence();
  /// Pings every connected agent when a heartbeat interval has passed since the last round; the
  /// agents fence themselves when they hear nothing for heartbeat.timeout.
  void send_pings_when_due();
  int64_t ping_spacing_ms() const;
  void host_lost(AgentLink& link, const std::string& reason, int64_t silent_ms = -1);

  // ---- routing: one handler per message type (driver_routing.cpp)
  struct CommWarnWindow {  ///< NCCL WARN lines of one rank, counted within a window
    int64_t started_ms = 0;  ///< 0: no window open
    int64_t repeated = 0;
    int gen = 0;
    std::string host;
    std::string last_line;
  };
  static constexpr int64_t kCommWarnWindowMs = 10'000;
  void flush_comm_warn(int rank, CommWarnWindow& window);
  /// Records the counts of windows that ended (all: every open one, at the end of the run).
  void flush_comm_warns(bool all);
  /// One frame body an agent sent (AgentLink::Received): parsed, then dispatched by type.
  void route_frame(AgentLink& link, std::string_view body);
  void agent_protocol_error(AgentLink& link, const std::string& problem);
  void worker_protocol_error(AgentLink& link, std::optional<int> gen, std::optional<int> rank, int64_t pid,
                             const std::string& problem);
  void on_agent_message(AgentLink& link, const proto::AgentHello& hello);
  void on_agent_message(AgentLink& link, const proto::WorkerStartedReport& started);
  void on_agent_message(AgentLink& link, const proto::WorkerSpawnFailedReport& failed);
  void on_agent_message(AgentLink& link, const proto::WorkerExitReport& exit);
  void on_agent_message(AgentLink& link, const proto::WorkerLogLine& log);
  void on_agent_message(AgentLink& link, const proto::FromWorker& from);
  void on_agent_message(AgentLink& link, const proto::AgentBeat& beat);
  void on_agent_message(AgentLink& link, const proto::Pong& pong);
  void on_agent_message(AgentLink& link, const proto::PortReply& port);
  void on_agent_message(AgentLink& link, const proto::SampleReply& sample);
  void on_agent_message(AgentLink& link, const proto::Released& released);
  void on_agent_message(AgentLink& link, const proto::GenChangedReply& reply);
  void on_agent_message(AgentLink& link, const proto::AgentError& error);
  void on_agent_message(AgentLink& link, const proto::AgentBye& bye);
  void on_agent_message(AgentLink& link, const proto::WorkerProtocolError& error);
  void on_agent_message(AgentLink& link, const proto::FlightRecorderDump& dump);
  // ---- host resources from the agents' beats (driver_resources.cpp)
  /// Keeps the newest per host, records Xids and new uncorrected ECC errors as events, and
  /// writes the hosts' resources to metrics.jsonl at most every kResourcesMetricsSpacingMs.
  void on_host_resources(AgentLink& link, const proto::HostResources& resources);
  void write_resources_metrics();
  void on_worker_message(AgentLink& link, const proto::FromWorker& from, const proto::WorkerHello& hello);
  void on_worker_message(AgentLink& link, const proto::FromWorker& from, const proto::WorkerBeat& beat);
  void on_worker_message(AgentLink& link, const proto::FromWorker& from, const proto::CommReady& ready);
  void on_worker_message(AgentLink& link, const proto::FromWorker& from,
                         const proto::CheckpointCommittedReport& committed);
  void on_worker_message(AgentLink& link, const proto::FromWorker& from,
                         const proto::CheckpointRejectedReport& rejected);
  void on_worker_message(AgentLink& link, const proto::FromWorker& from, const proto::WorkerBye& bye);
  template <class StoreRequest>
  void on_worker_message(AgentLink& link, const proto::FromWorker& from, const StoreRequest& request);

  // ---- actions (driver_actions.cpp)
  void feed(const supervisor::Event& event);
  void perform(const supervisor::Action& action);
  void start_generation(const supervisor::StartGeneration& start);
  void stop_generation(const supervisor::StopGeneration& stop);
  void send_store_replies(const std::vector<store::StoreReply>& replies);
  void capture_sample(const supervisor::CaptureSample& sample);
  void spawn_generation(int port);
  /// The spawn frame for `ranks` of `host` (all of its ranks when empty), each worker's env
  /// with `extra` on top.
  nlohmann::json spawn_frame(int gen, const plan::RankPlan& plan, const GenerationContext& context,
                             const EnvMap& common, const plan::PlanHost& host, const std::vector<int>& ranks,
                             const EnvMap& extra);
  /// In-place recovery: store to the new generation, gen_changed to every host, a spawn of the
  /// replaced ranks only (DTRAIN_JOIN_LIVE), on the generation's master address and port.
  void continue_in_place(const supervisor::ContinueInPlace& action);
  void kill_ranks(const supervisor::KillRanks& kill);
  MasterAddressFacts master_address_facts(const plan::RankPlan& plan);

  // ---- snapshots (driver_snapshots.cpp)
  /// Builds state.json's snapshot and hands it to the recorder: at once when forced or when
  /// the run's state changed, else at most every state_write_spacing_ms_.
  void write_state(bool force);
  void show_status();
  void write_metrics(bool force);

  // ---- the end (run_summary.cpp)
  void print_summary(const supervisor::FinishRun& finish);

  // ---- task metrics (driver_metrics.cpp)
  /// generation.stepped, straggler samples and events, then write_prometheus(false).
  void update_task_metrics();
  /// metrics.prom, the textfile and the endpoint's text: every metrics.interval, or now when forced.
  void write_prometheus(bool force);
  void observe_for_metrics(const nlohmann::json& event);

  void record(nlohmann::json event) {
    observe_for_metrics(event);
    recorder_.record(std::move(event));
  }
  spdlog::logger& log() { return recorder_.log(); }
  std::string log_path(int rank) const { return run_.rank_log_path(rank); }

  SystemClock system_clock_;
  const Clock& clock_;
  spec::JobSpec spec_;
  RunDirectory run_;
  RunRecorder recorder_;
  std::string dtrain_exe_;
  bool detached_;
  supervisor::Supervisor supervisor_;
  store::KvStore store_;
  std::optional<ControlSocket> control_;
  /// Where ctl.sock lives and what config.runtime_dir names: /tmp/dtrain-<uid>/<id>, or this
  /// run's private fallback when that was refused (set by run()).
  RuntimeDirectoryChoice runtime_dir_;
  AgentTransports transports_;
  std::map<std::string, std::unique_ptr<AgentLink>> links_;
  std::vector<RankMetrics> metrics_;
  std::optional<supervisor::StartGeneration> pending_start_;
  std::optional<GenerationContext> spawned_context_;  ///< the newest generation spawned (in place: reused)
  std::optional<MasterAddressFacts> launch_node_facts_;  ///< looked up once, when first needed
  int64_t pending_port_id_ = 0;
  int64_t next_request_id_ = 1;
  std::optional<supervisor::FinishRun> finished_;
  UniqueFd signal_read_;
  UniqueFd signal_write_;
  int signals_seen_ = 0;
  std::optional<int64_t> walltime_deadline_ms_;  ///< checkpoint.before_walltime, monotonic
  bool walltime_request_done_ = false;
  int64_t submitted_wall_ms_;
  bool resumed_ = false;
  int64_t resumed_wall_ms_ = 0;
  std::optional<supervisor::ResumeFrom> pending_resume_;
  int64_t last_state_write_ms_ = 0;
  int64_t last_ping_ms_ = 0;
  int64_t last_metrics_ms_ = 0;
  int64_t last_status_ms_ = 0;
  int64_t last_log_flush_ms_ = 0;
  int64_t last_tick_ms_ = 0;
  int64_t last_full_pump_ms_ = 0;
  std::map<int, CommWarnWindow> comm_warns_;  ///< by rank
  static constexpr int64_t kStateWriteSpacingMs = 500;
  static constexpr size_t kMetricsDetailRanks = 64;
  int64_t state_write_spacing_ms_ = kStateWriteSpacingMs;
  int64_t last_checkpoint_step_ = -1;
  std::string last_state_name_;
  std::string hostname_;  ///< of this machine, for state.json
  std::map<int, nlohmann::json> exit_tails_;  ///< rank → its last output lines, for the failure summary
  std::map<std::string, int> protocol_errors_;  ///< sender → messages of it that could not be parsed
  proto::AgentFrameParser frame_parser_;  ///< one for every link: it keeps its buffers between frames
  /// The newest resources each host's agent measured (CPU, memory, workers, GPUs): for metrics,
  /// status and Prometheus. Xids are not kept here (they are events: gpu.xid).
  std::map<std::string, proto::HostResources> host_resources_;
  int64_t last_resources_metrics_ms_ = 0;
  TaskMetricsState task_metrics_{spec_.metrics.straggler_threshold};
  bool task_metrics_seeded_ = false;  ///< events written before this driver fed to task_metrics_
  static constexpr int64_t kResourcesMetricsSpacingMs = 5'000;  ///< as metrics.jsonl's rank lines
};

/// Forks the supervisor into the background. In the parent: prints the run id and returns the
/// exit code for it; in the child (new session, stdio on /dev/null): returns nullopt, and `lock`
/// (shared with the parent by fork, so the run is never unlocked in between) names the child.
std::optional<int> detach(const std::string& run_id, const char* what, const RunLock& lock);
/// The console for a foreground (terminal or plain) or detached (quiet) supervisor.
Console::Mode console_mode(bool detached);

/// This machine's name (gethostname).
std::string this_hostname();
/// `path` made absolute against the working directory.
std::string absolute_path(const std::string& path);

}  // namespace dtrain::run
