#pragma once
// FrameRouter: agent frames → typed messages → supervisor Events and per-rank progress. Every
// frame is parsed once (proto::AgentFrameParser, which also parses a worker's message the agent
// forwarded: an agent is a peer too) and dispatched by type to one handler, a worker's message
// likewise. Nothing here reads raw JSON; a frame that does not parse is a protocol.error event
// naming its sender, and only a flood of them fails that sender. What the messages become
// leaves through Output (the driver), so a test can script frames and see what comes out.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>
#include <spdlog/logger.h>

#include "launcher/base/clock.h"
#include "launcher/proto/agent_frame_parser.h"
#include "launcher/proto/agent_messages.h"
#include "launcher/run/agent_link.h"
#include "launcher/run/driver_output.h"
#include "launcher/run/rank_progress.h"
#include "launcher/runlog/run_directory.h"
#include "launcher/store/kv_store.h"
#include "launcher/supervisor/supervisor.h"

namespace dtrain::run {

/// A sender whose messages could not be parsed this many times is treated as failed (a worker:
/// its rank fails; an agent: its host is lost). One bad message is only an event.
constexpr int kMaxProtocolErrorsPerSender = 100;

class FrameRouter {
 public:
  /// Where routed messages go, beyond what every part hands the driver (DriverOutput). RunDriver
  /// is the real one; an interface so that tests can feed the router frames and collect what
  /// comes out (frame_router_test).
  class Output : public DriverOutput {
   public:
    /// `text` into `path`, then `event` naming it (RunRecorder::write_file_then_record).
    virtual void write_file_then_record(std::string path, std::string text, nlohmann::json event) = 0;
    /// `text` into `path`, not fsync'd (a host's facts: re-made at every connect).
    virtual void write_unsynced_file(std::string path, std::string text) = 0;
    /// A line of a worker's output (without its newline; `stream` "stdout" or "stderr") for its
    /// rank log and, when chosen, the terminal.
    virtual void rank_output(int rank, int gen, std::string_view stream, std::string line) = 0;
    virtual void console_line(std::string text) = 0;
    /// One metrics.jsonl line.
    virtual void metrics_line(nlohmann::json line) = 0;
    /// The host's agent is gone or unusable: stop listening to it, tell the supervisor.
    virtual void host_lost(AgentLink& link, const std::string& reason) = 0;
    /// A ping to `link` now (after hello: the clock offset from a true round trip).
    virtual void ping(AgentLink& link) = 0;
    /// The agent of rank 0's host reserved `port` for the request `request_id`.
    virtual void port_reserved(int64_t request_id, int port) = 0;
    /// The agent on `host` could not reserve a port.
    virtual void port_reservation_failed(const std::string& host, const std::string& error) = 0;
    /// A relay's agent carried bytes from (relay_from), or the end of (relay_closed), the session
    /// of a host it relays (relayed_connection.h). The driver checks that it relays that host.
    virtual void relay_from(AgentLink& relay, proto::RelayFromReport from) = 0;
    /// `link`'s agent said hello (before the supervisor hears of it): a relay may start its hosts.
    virtual void agent_connected(AgentLink& link) = 0;
    virtual void relay_closed(AgentLink& relay, const proto::RelayClosedReport& closed) = 0;
    /// A relay's agent carried its hosts' beats and pongs (relay_batch): the driver checks that
    /// it relays each host, and routes each as that host's own (route_relayed).
    virtual void relay_batch(AgentLink& relay, proto::RelayBatchReport batch) = 0;
    /// A re-attach reached the agent that ran `link`'s workers (its relay was lost).
    virtual void agent_reattached(AgentLink& link, const proto::ReattachedReport& report) = 0;
  };

  /// Everything referenced must outlive the router. The router reads the supervisor (its
  /// generation and plan) and never feeds it but through `output`.
  FrameRouter(Output& output, const supervisor::Supervisor& supervisor, store::KvStore& store,
              RankProgressTable& progress, const RunDirectory& run, const Clock& clock);

  /// One frame body an agent sent (AgentLink::Received): parsed, then dispatched by type.
  void route(AgentLink& link, std::string_view body);
  /// A beat or pong `link`'s agent sent, which its relay carried in a relay_batch.
  void route_relayed(AgentLink& link, const proto::RelayedMessage& relayed);

  /// Records the counts of NCCL WARN windows that ended (all: every open one, at the end).
  void flush_comm_warns(bool all);
  /// A lost host's last resources must not stand in metrics as if current.
  void forget_host(const std::string& host) { host_resources_.erase(host); }
  /// The newest resources each host's agent measured (CPU, memory, workers, GPUs), for metrics
  /// and Prometheus. Xids are not kept here (they are events: gpu.xid).
  const std::map<std::string, proto::HostResources>& host_resources() const { return host_resources_; }
  /// A rank's last output lines from its exit report (the failure summary), or null.
  const std::vector<std::string>* exit_tail(int rank) const;
  /// The newest step any rank committed a checkpoint of; -1 when none.
  int64_t last_checkpoint_step() const { return last_checkpoint_step_; }
  /// A resumed run starts from the checkpoints its predecessor committed.
  void set_last_checkpoint_step(int64_t step) { last_checkpoint_step_ = step; }

  /// metrics.jsonl's host lines: at most this often (as its rank lines), and past
  /// kMetricsDetailHosts hosts a spread with the hosts that stand out instead of every host.
  static constexpr int64_t kResourcesMetricsSpacingMs = 5'000;
  static constexpr size_t kMetricsDetailHosts = 64;

 private:
  struct CommWarnWindow {  ///< NCCL WARN lines of one rank, counted within a window
    int64_t started_ms = 0;  ///< 0: no window open
    int64_t repeated = 0;
    int gen = 0;
    std::string host;
    std::string last_line;
  };
  static constexpr int64_t kCommWarnWindowMs = 10'000;
  void flush_comm_warn(int rank, CommWarnWindow& window);

  void agent_protocol_error(AgentLink& link, const std::string& problem);
  void worker_protocol_error(AgentLink& link, std::optional<int> gen, std::optional<int> rank, int64_t pid,
                             const std::string& problem);
  void on(AgentLink& link, const proto::AgentHello& hello);
  void on(AgentLink& link, const proto::WorkerStartedReport& started);
  void on(AgentLink& link, const proto::WorkerSpawnFailedReport& failed);
  void on(AgentLink& link, const proto::WorkerExitReport& exit);
  void on(AgentLink& link, const proto::WorkerLogLine& log);
  void on(AgentLink& link, const proto::FromWorker& from);
  void on(AgentLink& link, const proto::AgentBeat& beat);
  void on(AgentLink& link, const proto::Pong& pong);
  void on(AgentLink& link, const proto::PortReply& port);
  void on(AgentLink& link, const proto::SampleReply& sample);
  void on(AgentLink& link, const proto::Released& released);
  void on(AgentLink& link, const proto::GenChangedReply& reply);
  void on(AgentLink& link, const proto::HealthReply& reply);
  void on(AgentLink& link, const proto::AgentError& error);
  void on(AgentLink& link, const proto::AgentBye& bye);
  void on(AgentLink& link, const proto::WorkerProtocolError& error);
  void on(AgentLink& link, const proto::FlightRecorderDump& dump);
  void on(AgentLink& link, const proto::RelayFromReport& from) { out_.relay_from(link, from); }
  void on(AgentLink& link, const proto::RelayClosedReport& closed) { out_.relay_closed(link, closed); }
  void on(AgentLink& link, const proto::RelayBatchReport& batch) { out_.relay_batch(link, batch); }
  void on(AgentLink& link, const proto::ReattachedReport& report);
  // Host resources from the agents' beats (host_resources.cpp): keeps the newest per host,
  // records Xids and new uncorrected ECC errors as events, and writes metrics.jsonl lines.
  void on_host_resources(AgentLink& link, const proto::HostResources& resources);
  void write_resources_metrics();
  // A worker's message, as forwarded by its agent.
  void on_worker(AgentLink& link, const proto::FromWorker& from, const proto::WorkerHello& hello);
  void on_worker(AgentLink& link, const proto::FromWorker& from, const proto::WorkerBeat& beat);
  void on_worker(AgentLink& link, const proto::FromWorker& from, const proto::CommReady& ready);
  void on_worker(AgentLink& link, const proto::FromWorker& from, const proto::CheckpointCommittedReport& committed);
  void on_worker(AgentLink& link, const proto::FromWorker& from, const proto::CheckpointRejectedReport& rejected);
  void on_worker(AgentLink& link, const proto::FromWorker& from, const proto::WorkerBye& bye);
  template <class StoreRequest>
  void on_worker(AgentLink& link, const proto::FromWorker& from, const StoreRequest& request);

  Output& out_;
  const supervisor::Supervisor& supervisor_;
  store::KvStore& store_;
  RankProgressTable& progress_;
  const RunDirectory& run_;
  const Clock& clock_;
  proto::AgentFrameParser frame_parser_;  ///< one for every link: it keeps its buffers between frames
  std::map<std::string, int> protocol_errors_;  ///< sender → messages of it that could not be parsed
  std::map<int, CommWarnWindow> comm_warns_;    ///< by rank
  std::map<int, std::vector<std::string>> exit_tails_;  ///< rank → its last output lines
  std::map<std::string, proto::HostResources> host_resources_;
  int64_t last_resources_metrics_ms_ = 0;
  int64_t last_checkpoint_step_ = -1;
};

}  // namespace dtrain::run
