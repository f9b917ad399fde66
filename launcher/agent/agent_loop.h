#pragma once
// The agent's state and handlers (internal to launcher/agent): agent.cpp runs the loop, the
// supervisor's frames and the fence; agent_workers.cpp starts workers and keeps warm standbys.
// One class, two files, so that neither passes 800 lines; nothing outside this module sees it.

#include <signal.h>
#include <sys/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "launcher/agent/health_runner.h"
#include "launcher/agent/kill_operation.h"
#include "launcher/agent/outbox.h"
#include "launcher/agent/relay.h"
#include "launcher/agent/resource_sampler.h"
#include "launcher/agent/worker_files.h"
#include "launcher/agent/worker_process.h"
#include "launcher/agent/worker_socket.h"
#include "launcher/base/clock.h"
#include "launcher/base/exit_code.h"
#include "launcher/base/fd.h"
#include "launcher/proto/agent_messages.h"
#include "launcher/proto/frame.h"
#include "launcher/proto/supervisor_messages.h"

namespace dtrain::agent::detail {

constexpr size_t kMaxTailLines = 10'000;
constexpr int64_t kStandbyRestartMs = 1'000;   // at most one replacement of a dead standby per second
constexpr int64_t kStandbyRefillDelayMs = 1'000;  // from an assign to the standby that replaces it
// A pool of an unmodified script (spawn.standby_bootstrap) refills once every worker of this host
// has beaten since its spawn (its recovery is over), or this long after the spawn: each refill
// imports torch, seconds of CPU that a restarting generation would otherwise lose.
constexpr int64_t kPoolRefillMaxWaitMs = 30'000;

struct Config {
  std::string run_id;
  std::string host;
  std::string runtime_dir;
  int64_t heartbeat_interval_ms = 0;
  int64_t heartbeat_timeout_ms = 0;
  bool batch_beats = false;  ///< worker beats ride on the agent's beat (messages.h)
};

class Agent {
 public:
  Agent(int input_fd, int output_fd) : input_fd_(input_fd), out_(output_fd) {}
  int run();

 private:
  Status install_signal_handling();
  void loop_once();
  void poll_and_dispatch();
  int64_t next_wakeup_ms(int64_t now) const;
  void check_timers(int64_t now);
  void read_input();
  void read_signals();
  void reap_children();
  void advance_kills(int64_t now);
  void handle_frame(const nlohmann::json& frame);

  // One handler per supervisor → agent message (proto/supervisor_messages.h).
  void on(const proto::AgentConfig& config);
  void on(const proto::SpawnRequest& spawn);
  void on(const proto::KillRequest& kill);
  void on(const proto::PingRequest& ping);
  void on(const proto::ToWorkerRequest& to_worker);
  void on(const proto::ReservePortRequest& reserve);
  void on(const proto::FenceRequest& fence);
  void on(const proto::SampleRequest& sample);
  void on(const proto::DumpRequest& dump);
  void on(const proto::GenChangedRequest& change);
  void on(const proto::HealthCheckRequest& request);
  void on(const proto::RelayOpenRequest& open);
  void on(const proto::RelayToRequest& to);
  void on(const proto::RelayFanoutRequest& fanout);
  void on(const proto::RelayCloseRequest& close);
  void on(const proto::AgentAttachRequest& attach);

  // Re-attaching (agent_attach.cpp; proto/messages.h config.reattach_ms).
  /// Listens for re-attaches; returns why it could not ("" when it does).
  std::string open_attach_socket(int64_t reattach_ms);
  void close_attach_socket();
  bool reattachable() const { return reattach_ms_ > 0 && attach_listener_.valid(); }
  /// The channel to the supervisor ended: a re-attachable agent keeps its workers and waits for
  /// a re-attach; any other fences.
  void channel_ended(std::string reason, ExitCode code);
  /// Gives up the current channel's fds (the first session's: /dev/null in their place).
  void release_channel();
  void accept_attach();
  /// Fences once a detached agent has waited reattach_ms.
  void check_detached(int64_t now);
  /// True the first time a SIGTERM/SIGHUP comes with our parent gone (sshd's session process
  /// ends with the connection): the channel's end, not an order to stop.
  bool parent_gone_once();
  /// Keeps a worker's exit report for a re-attach (the newest two generations).
  void remember_exit(const proto::WorkerExitReport& exit);
  /// The relay's children (relay.h): pumped when one of their fds is ready, and every 100 ms
  /// while an SSH session needs it.
  void pump_relay(int64_t now);
  /// The children to reap: every worker, and while relaying, every child of this process but
  /// the relay's ssh processes (their owners reap them).
  std::vector<pid_t> reapable_children() const;

  /// Refuses a launch that would collide with a live worker or a generation gen_changed moved
  /// on from (spawn_failed), else adds its files and starts it.
  void spawn_one(WorkerLaunch launch, bool instrument);
  void open_worker_files();
  void add_worker_files(WorkerLaunch& launch, bool instrument);
  /// The bootstrap first on PYTHONPATH (spec worker.instrument).
  void add_bootstrap_path(WorkerLaunch& launch, bool instrument);

  /// Warm standbys (messages.h spawn.standby): starts what the pool lacks (a dead standby's
  /// replacement at most once a second, an assigned one's a second after the assign).
  void keep_standbys(int64_t now);
  int standby_count() const;
  /// When keep_standbys may start the next standby: after standby_not_before_ms_ and, for a pool
  /// of an unmodified script, once this host's workers have all beaten (or the wait ran out).
  int64_t next_standby_start_ms() const;
  /// A ready standby becomes the worker of `launch` (assign): true when one did, and it is reported
  /// started; false when none is ready (or the assign could not be sent), for a normal spawn.
  bool assign_standby(const WorkerLaunch& launch);
  void send_beat(int64_t now);
  /// Queues a health check on the runner's thread (started on first use), with the Xids the
  /// sampler saw since the previous one and this run's workers.
  void queue_health_check(int64_t id, std::string moment, bool diagnose);
  void send_health_replies();
  /// Tells the resource sampler which workers are alive (after a spawn or a reap).
  void update_sampled_workers();
  /// A worker's message to the supervisor: at once as from_worker, except (with batch_beats)
  /// a beat after the worker's first one without a phase, which waits for the agent's next beat
  /// (newest wins). Anything else the worker sends first flushes its held beat, so its order holds.
  void forward_from_worker(int gen, int rank, pid_t pid, proto::WorkerMessage message);
  void flush_held_beat(int gen, int rank);
  /// A line from a worker's connection that was dropped (it did not parse, or lost the framing).
  void report_worker_line_problem(const WorkerLineProblem& problem);
  /// What the worker sockets hand their messages and problems to (forward_from_worker,
  /// report_worker_line_problem): when they are ready, and when a dead worker's are drained.
  WorkerMessageSink worker_message_sink();
  WorkerProblemSink worker_problem_sink();
  void send_error(proto::AgentError error);
  void protocol_error(const std::string& what);
  void begin_fence(std::string reason, ExitCode code);
  void finish_fence(int64_t now);
  std::string who() const { return config_ ? "agent " + config_->host : "agent"; }
  int64_t now_ms() const { return clock_.monotonic_ms(); }
  int64_t agent_time_ms() const { return clock_.wall_ms(); }

  int input_fd_;
  Outbox out_;
  proto::FrameDecoder decoder_;
  SystemClock clock_;
  UniqueFd signal_fd_;
  sigset_t old_mask_{};
  bool input_open_ = true;
  std::optional<Config> config_;
  std::unique_ptr<WorkerSocketServer> sockets_;
  std::optional<WorkerFiles> files_;  ///< bootstrap + error files; absent if they could not be made
  std::map<pid_t, std::unique_ptr<WorkerProcess>> workers_;
  std::map<std::pair<int, int>, std::pair<pid_t, proto::WorkerBeat>> held_beats_;  ///< (gen, rank) → newest beat
  std::set<std::pair<int, int>> beaten_;  ///< (gen, rank) of live workers whose first beat went out
  std::vector<KillOperation> kills_;
  std::map<int, int> moved_generations_;  ///< gen_changed so far: from → to
  /// Warm standbys: the newest spawn's argv, workdir and common env (launch), its instrument, and
  /// how many to keep (0 after a kill of every generation, until a spawn asks again).
  struct StandbyPool {
    WorkerLaunch launch;
    bool instrument = false;
    int wanted = 0;
    /// Present: a pool of an unmodified script (spawn.standby_bootstrap): its processes wait in
    /// the bootstrap after importing these, and every spawned worker takes one when ready.
    std::optional<std::vector<std::string>> bootstrap_imports;
    int64_t refill_wait_until_ms = 0;  ///< a bootstrap pool waits for beats until then
  };
  StandbyPool standbys_;
  int64_t standby_not_before_ms_ = 0;  ///< no standby starts before (a dead one's replacement waits)
  int64_t last_standby_start_ms_ = 0;
  std::unique_ptr<Relay> relay_;     ///< after relay_open: the children this agent relays
  bool relay_ready_ = false;         ///< a child's fd was ready this round
  int64_t last_relay_pump_ms_ = 0;
  std::unique_ptr<ResourceSampler> sampler_;  ///< started after hello; its thread reads /proc and GPUs
  std::optional<proto::HealthRequest> health_request_;  ///< config.health
  std::unique_ptr<HealthRunner> health_;      ///< the checks' thread, from the first check on
  int64_t started_ms_ = 0;
  int64_t last_frame_ms_ = 0;
  int64_t next_beat_ms_ = 0;

  std::optional<std::string> fence_reason_;
  std::optional<KillOperation> fence_kill_;
  size_t workers_at_fence_ = 0;
  ExitCode exit_code_ = ExitCode::ok;
  bool done_ = false;

  int64_t reattach_ms_ = 0;            ///< config.reattach_ms, once the attach socket listens
  UniqueFd attach_listener_;
  std::string attach_path_;
  UniqueFd channel_;                   ///< a re-attach's connection, once one came
  std::optional<int64_t> detached_since_ms_;
  std::string detach_reason_;
  pid_t parent_at_start_ = 0;
  bool parent_death_seen_ = false;
  std::map<std::pair<int, int>, proto::WorkerExitReport> recent_exits_;  ///< (gen, rank) → its exit
};

}  // namespace dtrain::agent::detail
