#pragma once
// RunDriver, the supervisor's event loop (internal to launcher/run). It keeps the loop, the agent
// links and carrying out the supervisor's Actions (perform); its parts are types of their own:
//   driver.cpp            the loop: waiting, pumping links, signals, silences and pings, the end;
//                         perform(), which hands each Action to the part that carries it out
//   generation_launcher.* GenerationLauncher: Actions → frames to agents (start/stop generations,
//                         in place, kills, samples), the pending start and the request ids
//   snapshot_writer.*     SnapshotWriter: state.json, metrics.jsonl and the console status, each
//                         paced, built from the supervisor and rank progress
//   driver_output.h       DriverOutput: what those parts hand back to the driver (Events, records)
//   frame_router.*        agent frames → typed messages → supervisor Events and rank progress
//   rank_progress.*       per-rank progress from beats, and the builder of every per-rank view
//   metrics_exporter.*    task metrics: generation.stepped, stragglers, goodput, metrics.prom / /metrics
//   checkpoint_requests.* CheckpointRequests: a checkpoint asked of every worker at one step
//                         (SIGUSR1, checkpoint.before_walltime), and the time-limit watch
//   slurm_time_limit.*    the Slurm job's time left (squeue), pumped by the loop, never waited for
//   pod_watch.*           hosts: kubernetes: pods deleted, ended or NotReady become lost hosts
//   run_summary.cpp       the end-of-run summary
//   run_recorder.*        where records go (events.jsonl, logs, files, console), off the loop
//   agent_transports.*    which transport reaches which host
//   submit_flow.cpp, resume_flow.cpp   `dtrain submit` and `dtrain resume` around a driver
// Everything that happens becomes a supervisor Event; everything the supervisor decides comes
// back as Actions that the driver carries out. One thread, one poll().

#include <cstdint>
#include <map>
#include <unordered_map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "launcher/base/clock.h"
#include "launcher/base/fd.h"
#include "launcher/hosts/created_job.h"
#include "launcher/plan/rank_plan.h"
#include "launcher/run/relay_tree.h"
#include "launcher/run/relayed_connection.h"
#include "launcher/run/agent_link.h"
#include "launcher/run/agent_transports.h"
#include "launcher/run/checkpoint_requests.h"
#include "launcher/run/control_socket.h"
#include "launcher/run/frame_router.h"
#include "launcher/run/generation_launcher.h"
#include "launcher/run/metrics_exporter.h"
#include "launcher/run/pod_watch.h"
#include "launcher/run/rank_progress.h"
#include "launcher/run/run_driver.h"
#include "launcher/run/run_recorder.h"
#include "launcher/run/signal_pipe.h"
#include "launcher/run/snapshot_writer.h"
#include "launcher/run/worker_env.h"
#include "launcher/runlog/run_directory.h"
#include "launcher/runlog/run_lock.h"
#include "launcher/store/kv_store.h"
#include "launcher/supervisor/supervisor.h"

namespace dtrain::run {

class RunDriver : private FrameRouter::Output, private GenerationLauncher::Output {
 public:
  RunDriver(spec::JobSpec spec, plan::RankPlan plan, RunDirectory run, EventLog events, std::string dtrain_exe,
            bool detached, Console console, const DriverSeams& seams);

  /// Continue a run whose supervisor died: call before run().
  void resume_from(const supervisor::ResumeFrom& from, int64_t submitted_wall_ms);

  /// kubernetes.job: the objects created for this run, which the driver now owns: their pods are
  /// watched (their selector), and they are deleted at the end whatever the end is, recorded as
  /// kubernetes.deleted before run.finished. Call before run().
  void own_created_job(hosts::CreatedJob created) { created_job_.emplace(std::move(created)); }

  /// Runs the job to its end; the process exit code.
  int run();

 private:
  // ---- the loop (driver.cpp)
  /// Before the loop: the run log, signals, the runtime directory and ctl.sock, the first
  /// state.json, a resume's first actions, the agents. An exit code when the run cannot start.
  std::optional<int> open_run();
  /// The event loop, until the supervisor finishes the run.
  void loop();
  /// After the loop: agents shut down, run.finished, the summary, the last metrics and
  /// state.json, the runtime directory removed. The process exit code.
  int close_run();
  void start_agents();
  void shut_down_agents();
  /// Moves bytes on each of `links` and routes the frames that arrived.
  void pump_links(const std::vector<AgentLink*>& links);
  void handle_signals();
  /// kubernetes.job: deletes what own_created_job() handed over, once, and records it.
  void delete_created_job(const std::string& why);
  /// Asks every worker for a checkpoint (CheckpointRequests), and records that it did: SIGUSR1
  /// from Slurm before its time limit, or checkpoint.before_walltime.
  void request_checkpoints(const std::string& reason);
  /// SIGTERM or `dtrain stop --checkpoint`: every rank asked to save one step, then the stop
  /// (CheckpointRequests::preemption_due, at each tick). Once per run.
  void begin_preemption(const std::string& reason);
  ControlReply handle_control(const ControlRequest& request);
  void check_silence();
  /// Pings every connected agent when a heartbeat interval has passed since the last round; the
  /// agents fence themselves when they hear nothing for heartbeat.timeout.
  void send_pings_when_due();
  int64_t ping_spacing_ms() const;
  void host_lost(AgentLink& link, const std::string& reason, int64_t silent_ms);
  /// hosts: kubernetes: the pods the watch saw lost become lost hosts (at each tick).
  void check_pods();
  /// Connected hosts not heard from for the supervisor's HangTimeouts::unheard_after_ms().
  std::vector<std::string> unheard_hosts() const;

  // ---- what routed frames and launches become (FrameRouter::Output, GenerationLauncher::Output)
  void feed(const supervisor::Event& event) override;
  void record(nlohmann::json event) override {
    metrics_.observe(event);
    recorder_.record(std::move(event));
  }
  void write_file_then_record(std::string path, std::string text, nlohmann::json event) override {
    recorder_.write_file_then_record(std::move(path), std::move(text), std::move(event));
  }
  void write_file(std::string path, std::string text) override {
    recorder_.write_file(std::move(path), std::move(text));
  }
  void write_unsynced_file(std::string path, std::string text) override {
    recorder_.write_file(std::move(path), std::move(text), Durability::kUnsynced);
  }
  void rank_output(int rank, int gen, std::string_view stream, std::string line) override {
    recorder_.rank_output(rank, gen, stream, std::move(line));
  }
  void console_line(std::string text) override { recorder_.console_line(std::move(text)); }
  spdlog::logger& log() override { return recorder_.log(); }
  void metrics_line(nlohmann::json line) override { recorder_.metrics(std::move(line)); }
  void host_lost(AgentLink& link, const std::string& reason) override { host_lost(link, reason, -1); }
  void ping(AgentLink& link) override;
  void send_store_replies(const std::vector<store::StoreReply>& replies) override;
  void port_reserved(int64_t request_id, int port) override { launcher_.port_reserved(request_id, port); }
  void port_reservation_failed(const std::string& host, const std::string& error) override {
    launcher_.port_reservation_failed(host, error);
  }
  // ---- the relay tree (driver_relays.cpp)
  void relay_from(AgentLink& relay, proto::RelayFromReport from) override;
  void relay_closed(AgentLink& relay, const proto::RelayClosedReport& closed) override;
  void relay_batch(AgentLink& relay, proto::RelayBatchReport batch) override;
  /// A relay frame (`frame`: its type) about a host that relay does not carry: an agent.error.
  void refuse_relayed(const AgentLink& relay, const char* frame, const std::string& host);
  /// A relay that said hello gets relay_open, and its hosts' agents start through it.
  void agent_connected(AgentLink& link) override;
  /// Starts one host's agent, directly or (when the tree says so) through its relay, and sends
  /// its config; a relay also gets relay_open with its children. False when it could not start.
  void start_agent(const spec::HostEntry& host);
  /// `link`'s config (a relayed host's asks it to wait for a re-attach when its channel ends).
  void send_config(AgentLink& link);
  /// The host `link` names, in the spec (hosts or spares).
  const spec::HostEntry* host_entry(const std::string& host) const;
  /// The relay tree of these hosts (scale:, relay_tree.h), over those reached by SSH.
  RelayTree plan_run_relay_tree(const std::vector<spec::HostEntry>& hosts) const;
  /// `host`'s connection: through its relay when it has one, else its transport's.
  Result<std::unique_ptr<transport::AgentConnection>> connect_agent(const spec::HostEntry& host);
  /// Sends relay_open to `link` when it relays, and starts its hosts' agents through it.
  void open_relay(AgentLink& link);
  /// The hosts `relay` was to relay, not started yet (it was lost before its hello): reached
  /// directly instead, so that a dead relay host costs only itself.
  void start_orphans_directly(const std::string& relay);
  /// A relayed host's connection (owned by its link) and that link: every relay_from finds both
  /// by name, tens of thousands a second at scale, hence a hash map.
  struct Relayed {
    RelayedConnection* connection = nullptr;
    AgentLink* link = nullptr;  ///< set once start_agent made the link
  };
  /// The relayed host's connection and link when `relay` relays it, else nullptr (a relay
  /// speaks only for the hosts it was given).
  Relayed* relayed_by(const AgentLink& relay, const std::string& host);
  /// Sends one ping to every host in `hosts_by_relay` (relay → its hosts), one relay_fanout
  /// per relay; the names are moved out.
  void ping_through_relays(std::unordered_map<std::string, std::vector<std::string>>& hosts_by_relay);
  /// A lost relay's hosts: their relayed sessions end (each is then re-attached or lost).
  void lose_relayed_hosts(const AgentLink& relay, const std::string& reason);
  /// `link`'s connection closed: the host is lost (a re-attach that ended so failed).
  void connection_ended(AgentLink& link);
  bool can_reattach(const AgentLink& link) const;
  /// The hosts `relay` carried that can be re-attached: reached again directly, before anyone
  /// hears of the relay's loss (lose_relayed_hosts then ends the others).
  void reattach_relayed_hosts(const AgentLink& relay);
  /// A fresh agent process on the host, over its own transport, whose first frame is attach:
  /// it carries the link to the agent that kept the workers (agent/attach_pipe.h).
  void reattach_directly(AgentLink& link, const std::string& reason);
  void agent_reattached(AgentLink& link, const proto::ReattachedReport& report) override;
  /// Pumps the links of relayed hosts that relay frames just fed.
  void pump_relayed();

  /// Hands `action` to the part that carries it out (the launcher, the snapshot writer, the loop).
  void perform(const supervisor::Action& action);

  /// When the loop last did each of its paced chores (monotonic ms).
  struct LoopPacing {
    int64_t last_ping_ms = 0;
    int64_t last_tick_ms = 0;  ///< silences, the walltime, NCCL WARN counts, the supervisor's Tick
    int64_t last_full_pump_ms = 0;  ///< of the links whose transport needs a pump every 100 ms
    int64_t last_log_flush_ms = 0;
  };

  SystemClock system_clock_;
  const Clock& clock_;
  spec::JobSpec spec_;
  RunDirectory run_;
  RunRecorder recorder_;
  supervisor::Supervisor supervisor_;
  store::KvStore store_;
  std::optional<ControlSocket> control_;
  /// Where ctl.sock lives and what config.runtime_dir names: /tmp/dtrain-<uid>/<id>, or this
  /// run's private fallback when that was refused (set by run()).
  RuntimeDirectoryChoice runtime_dir_;
  AgentTransports transports_;
  AgentLinks links_;
  RelayTree relay_tree_;  ///< empty: every agent connected directly
  std::unordered_map<std::string, Relayed> relayed_;  ///< relayed host → its connection and link
  std::vector<AgentLink*> relayed_fed_;  ///< relayed links that relay frames fed since the last pump_relayed
  std::vector<spec::HostEntry> waiting_for_relay_;  ///< relayed hosts whose relay has not said hello yet
  bool links_added_ = false;  ///< a link was added after the loop began: it rebuilds its lists
  int64_t health_requests_ = 0;  ///< ids of health requests sent (0 is each agent's `start` report)
  RankProgressTable progress_;  ///< per-rank progress from beats, and every per-rank view
  FrameRouter router_{*this, supervisor_, store_, progress_, run_, clock_};
  std::optional<supervisor::FinishRun> finished_;
  std::optional<SignalPipe> signals_;  ///< while run() runs
  int signals_seen_ = 0;
  CheckpointRequests checkpoints_{spec_, supervisor_, progress_, links_};
  RunTimes times_;
  std::optional<supervisor::ResumeFrom> pending_resume_;
  /// hosts: kubernetes with the real kubectl transport (not an injected one): from open_run to
  /// close_run, whose reset kills and reaps its kubectl.
  std::optional<PodWatch> pod_watch_;
  std::optional<hosts::CreatedJob> created_job_;  ///< kubernetes.job: deleted at the end
  bool watch_pods_ = false;
  bool relay_over_transport_ = false;  ///< DriverSeams::relay_over_transport
  LoopPacing pacing_;
  MetricsExporter metrics_{spec_, run_, recorder_, clock_};
  GenerationLauncher launcher_;
  SnapshotWriter snapshots_;
};

/// Forks the supervisor into the background. In the parent: prints the run id and returns the
/// exit code for it; in the child (new session, stdio on /dev/null): returns nullopt, and `lock`
/// (shared with the parent by fork, so the run is never unlocked in between) names the child.
std::optional<int> detach(const std::string& run_id, const char* what, const RunLock& lock);
/// The console for a foreground (terminal or plain) or detached (quiet) supervisor.
Console::Mode console_mode(bool detached);
/// " · output: all 4 ranks" for the first line of a foreground run; empty with --output none.
std::string output_clause(const WorkerEcho& echo);

/// This machine's name (gethostname).
std::string this_hostname();
/// `path` made absolute against the working directory.
std::string absolute_path(const std::string& path);

}  // namespace dtrain::run
