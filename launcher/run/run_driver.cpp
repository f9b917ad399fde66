// The driver's event loop. Everything that happens becomes a supervisor Event; everything the
// supervisor decides comes back as Actions that this file carries out. One thread, one poll().

#include "launcher/run/run_driver.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <set>

#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/spdlog.h>

#include "launcher/base/clock.h"
#include "launcher/base/exit_code.h"
#include "launcher/base/fd.h"
#include "launcher/base/strings.h"
#include "launcher/base/version.h"
#include "launcher/hosts/run_hosts.h"
#include "launcher/plan/rank_plan.h"
#include "launcher/proto/agent_messages.h"
#include "launcher/proto/messages.h"
#include "launcher/proto/worker_messages.h"
#include "launcher/run/agent_link.h"
#include "launcher/run/console.h"
#include "launcher/run/control_socket.h"
#include "launcher/run/fd_watcher.h"
#include "launcher/run/resume_point.h"
#include "launcher/run/worker_env.h"
#include "launcher/runlog/event_log.h"
#include "launcher/runlog/json_access.h"
#include "launcher/runlog/rank_logs.h"
#include "launcher/runlog/run_directory.h"
#include "launcher/runlog/run_state.h"
#include "launcher/runlog/state_writer.h"
#include "launcher/store/kv_store.h"
#include "launcher/supervisor/supervisor.h"
#include "launcher/transport/local_transport.h"
#include "launcher/transport/ssh_transport.h"
#include "worker/contract/env.h"
#include "worker/contract/wire.h"

namespace dtrain::run {

namespace {

namespace msg = proto::msg;
using nlohmann::json;
using supervisor::RunState;

// Signals become bytes on a pipe so that the loop handles them like any other input.
int g_signal_pipe_write = -1;

void on_signal(int signal_number) {
  if (g_signal_pipe_write >= 0) {
    unsigned char byte = static_cast<unsigned char>(signal_number);
    [[maybe_unused]] ssize_t ignored = ::write(g_signal_pipe_write, &byte, 1);
  }
}

std::string absolute_path(const std::string& path) {
  if (path.empty() || path[0] == '/') return path;
  char cwd[PATH_MAX];
  if (!::getcwd(cwd, sizeof cwd)) return path;
  return std::string(cwd) + "/" + path;
}

/// True when `name` resolves to an address that is not loopback (127/8, ::1): one that another
/// host could use. Debian maps a machine's own name to 127.0.1.1 in /etc/hosts.
bool resolves_beyond_loopback(const std::string& name) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (::getaddrinfo(name.c_str(), nullptr, &hints, &found) != 0) return false;
  bool routable = false;
  for (addrinfo* entry = found; entry != nullptr && !routable; entry = entry->ai_next) {
    if (entry->ai_family == AF_INET) {
      uint32_t address = ntohl(reinterpret_cast<const sockaddr_in*>(entry->ai_addr)->sin_addr.s_addr);
      routable = (address >> 24) != 127;
    } else if (entry->ai_family == AF_INET6) {
      routable = !IN6_IS_ADDR_LOOPBACK(&reinterpret_cast<const sockaddr_in6*>(entry->ai_addr)->sin6_addr);
    }
  }
  ::freeaddrinfo(found);
  return routable;
}

std::string this_hostname() {
  char name[256] = {};
  ::gethostname(name, sizeof name - 1);
  return name;
}

/// A sender whose messages could not be parsed this many times is treated as failed (a worker:
/// its rank fails; an agent: its host is lost). One bad message is only an event.
constexpr int kMaxProtocolErrorsPerSender = 100;

/// Per-rank progress the supervisor does not need but status and metrics do.
struct RankMetrics {
  int64_t last_beat_wall_ms = 0;
  std::optional<double> loss;
  std::optional<double> step_ms;
  bool speaks_protocol = false;
};

class RunDriver {
 public:
  RunDriver(spec::JobSpec spec, plan::RankPlan plan, RunDirectory run, EventLog events,
            std::string dtrain_exe, bool detached, Console console)
      : spec_(std::move(spec)),
        run_(std::move(run)),
        events_(std::move(events)),
        rank_logs_(run_.ranks_dir()),
        dtrain_exe_(std::move(dtrain_exe)),
        detached_(detached),
        console_(console),
        supervisor_(spec_, plan, clock_),
        submitted_wall_ms_(clock_.wall_ms()),
        state_writer_(run_.state_path()) {}

  /// Continue a run whose supervisor died: call before run().
  void resume_from(const supervisor::ResumeFrom& from, int64_t submitted_wall_ms) {
    resumed_ = true;
    submitted_wall_ms_ = submitted_wall_ms;
    resumed_wall_ms_ = clock_.wall_ms();
    pending_resume_ = from;
    last_checkpoint_step_ = from.committed_steps.empty() ? -1 : from.committed_steps.back();
  }

  /// Agents of every host through `transport` (not owned) instead of local/ssh.
  void use_transport(transport::Transport* transport) { injected_transport_ = transport; }

  int run();

 private:
  // ---- setup / teardown
  Status open_logs();
  void start_agents();
  void install_signal_handlers();
  void shut_down_agents();
  transport::SshTransport& ssh();

  // ---- inputs
  /// Moves bytes on each of `links` and handles the frames that arrived.
  void pump_links(const std::vector<AgentLink*>& links);
  /// NCCL WARN lines of one rank, counted within a window (on_agent_message(WorkerLogLine)).
  struct CommWarnWindow {
    int64_t started_ms = 0;  ///< 0: no window open
    int64_t repeated = 0;
    int gen = 0;
    std::string host;
    std::string last_line;
  };
  static constexpr int64_t kCommWarnWindowMs = 10'000;
  static constexpr size_t kMetricsDetailRanks = 64;
  static constexpr uint64_t kMetricsMaxBytes = 64ull << 20;
  void flush_comm_warn(int rank, CommWarnWindow& window);
  /// Records the counts of windows that ended (all: every open one, at the end of the run).
  void flush_comm_warns(bool all);
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
  void on_agent_message(AgentLink& link, const proto::AgentError& error);
  void on_agent_message(AgentLink& link, const proto::AgentBye& bye);
  void on_agent_message(AgentLink& link, const proto::WorkerProtocolError& error);
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
  void handle_signals();
  ControlReply handle_control(const ControlRequest& request);
  void check_silence();
  void host_lost(AgentLink& link, const std::string& reason, int64_t silent_ms = -1);

  // ---- outputs
  void feed(const supervisor::Event& event);
  void perform(const supervisor::Action& action);
  void start_generation(const supervisor::StartGeneration& start);
  void send_store_replies(const std::vector<store::StoreReply>& replies);
  void capture_sample(const supervisor::CaptureSample& sample);
  void save_sample(int gen, int rank, const std::string& host, int pid, const std::string& text);
  void spawn_generation(int port);
  MasterAddressFacts master_address_facts(const plan::RankPlan& plan);
  void record(json event);
  /// Builds state.json's snapshot and hands it to state_writer_: at once when forced or when
  /// the run's state changed, else at most every state_write_spacing_ms_.
  void write_state(bool force);
  /// Waits until the newest snapshot is on disk (end of run).
  void flush_state();
  void show_status();
  void write_metrics(bool force);
  void print_summary(const supervisor::FinishRun& finish);
  std::string log_path(int rank) const { return run_.rank_log_path(rank); }

  SystemClock clock_;
  spec::JobSpec spec_;
  RunDirectory run_;
  EventLog events_;
  RankLogs rank_logs_;
  std::string dtrain_exe_;
  bool detached_;
  Console console_;
  supervisor::Supervisor supervisor_;
  store::KvStore store_;
  std::shared_ptr<spdlog::logger> log_;
  std::optional<ControlSocket> control_;
  transport::LocalTransport local_transport_;
  transport::Transport* injected_transport_ = nullptr;
  std::unique_ptr<transport::SshTransport> ssh_transport_;
  std::map<std::string, std::unique_ptr<AgentLink>> links_;
  std::vector<RankMetrics> metrics_;
  std::optional<supervisor::StartGeneration> pending_start_;
  std::optional<MasterAddressFacts> launch_node_facts_;  ///< looked up once, when first needed
  int64_t pending_port_id_ = 0;
  int64_t next_request_id_ = 1;
  std::optional<supervisor::FinishRun> finished_;
  UniqueFd signal_read_;
  UniqueFd signal_write_;
  int signals_seen_ = 0;
  int64_t submitted_wall_ms_;
  StateWriter state_writer_;
  bool resumed_ = false;
  int64_t resumed_wall_ms_ = 0;
  std::optional<supervisor::ResumeFrom> pending_resume_;
  int64_t last_state_write_ms_ = 0;
  int64_t last_ping_ms_ = 0;
  int64_t last_metrics_ms_ = 0;
  int64_t last_tick_ms_ = 0;
  int64_t last_full_pump_ms_ = 0;
  std::map<int, CommWarnWindow> comm_warns_;  ///< by rank
  static constexpr int64_t kStateWriteSpacingMs = 500;
  int64_t state_write_spacing_ms_ = kStateWriteSpacingMs;
  int64_t last_checkpoint_step_ = -1;
  std::string last_state_name_;
  std::map<int, json> exit_tails_;  ///< rank → its last output lines, for the failure summary
  std::map<std::string, int> protocol_errors_;  ///< sender → messages of it that could not be parsed
};

// ---- setup ------------------------------------------------------------------------------------

Status RunDriver::open_logs() {
  try {
    auto sink = std::make_shared<spdlog::sinks::basic_file_sink_mt>(run_.supervisor_log_path());
    log_ = std::make_shared<spdlog::logger>("supervisor", sink);
    log_->set_pattern("%Y-%m-%dT%H:%M:%S.%eZ %^%l%$ %v", spdlog::pattern_time_type::utc);
    log_->flush_on(spdlog::level::info);
  } catch (const spdlog::spdlog_ex& error) {
    return Error::infra(run_.supervisor_log_path() + ": " + error.what());
  }
  ::chmod(run_.supervisor_log_path().c_str(), 0600);
  return {};
}

void RunDriver::install_signal_handlers() {
  if (Result<Pipe> pipe = make_pipe()) {
    signal_read_ = std::move(pipe->read_end);
    signal_write_ = std::move(pipe->write_end);
    (void)set_nonblocking(signal_read_.get());
    (void)set_nonblocking(signal_write_.get());
    g_signal_pipe_write = signal_write_.get();
  }
  struct sigaction action {};
  action.sa_handler = on_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  ::sigaction(SIGINT, &action, nullptr);
  ::sigaction(SIGTERM, &action, nullptr);
  ::sigaction(SIGHUP, &action, nullptr);
  ::signal(SIGPIPE, SIG_IGN);
}

void RunDriver::start_agents() {
  std::vector<spec::HostEntry> hosts = spec_.hosts;
  hosts.insert(hosts.end(), spec_.spares.begin(), spec_.spares.end());
  for (const spec::HostEntry& host : hosts) {
    transport::AgentTarget target;
    target.host = host.name;
    target.user = host.user.empty() ? spec_.ssh.user : host.user;
    target.port = host.port ? host.port : spec_.ssh.port;
    target.dtrain_path = dtrain_exe_;
    if (!host.is_local()) {
      target.dtrain_path = spec_.ssh.remote_dtrain;  // empty: provision this binary there
      target.port = host.port;
    }
    Result<std::unique_ptr<transport::AgentConnection>> connection =
        injected_transport_ ? injected_transport_->start_agent(target)
        : host.is_local()   ? local_transport_.start_agent(target)
                            : ssh().start_agent(target);
    if (!connection) {
      record({{"ev", "host.failed"}, {"host", host.name}, {"error", connection.error().message}});
      feed(supervisor::HostLost{host.name, connection.error().message});
      continue;
    }
    auto link = std::make_unique<AgentLink>(host.name, std::move(connection).value(),
                                            clock_.monotonic_ms(), clock_.wall_ms());
    link->send({{"type", msg::kConfig},
                {"protocol", proto::kProtocolVersion},
                {"run_id", run_.id()},
                {"host", host.name},
                {"runtime_dir", run_.runtime_dir()},
                {"heartbeat_interval_ms", spec_.heartbeat.interval.count()},
                {"heartbeat_timeout_ms", spec_.heartbeat.timeout.count()},
                {"supervisor_time_ms", clock_.wall_ms()},
                {"batch_beats", true}});
    log_->info("host {}: starting agent ({})", host.name, link->connection().describe());
    links_[host.name] = std::move(link);
  }
}

transport::SshTransport& RunDriver::ssh() {
  if (!ssh_transport_) {
    transport::SshOptions options = hosts::ssh_options_for(spec_);
    ssh_transport_ = std::make_unique<transport::SshTransport>(options);
    if (spec_.ssh.host_key_policy == spec::HostKeyPolicy::insecure) {
      record({{"ev", "ssh.insecure"}, {"detail", "ssh.host_key_policy is insecure: host keys are not checked"}});
      console_.line(clock_.wall_ms(), "warning: ssh.host_key_policy is insecure: host keys are not checked");
    }
  }
  return *ssh_transport_;
}

void RunDriver::shut_down_agents() {
  for (auto& [host, link] : links_) {
    if (!link->connection().closed()) link->send({{"type", msg::kFence}, {"reason", "run finished"}});
    link->connection().pump();
    link->connection().close_input();
  }
  for (auto& [host, link] : links_) {
    link->connection().shutdown(static_cast<int>(std::min<int64_t>(spec_.stop_grace.count(), 5000)));
    std::string diagnostics = link->connection().take_diagnostics();
    if (!diagnostics.empty()) log_->info("agent {}: {}", host, std::string(trim(diagnostics)));
  }
}

// ---- inputs -----------------------------------------------------------------------------------

void RunDriver::pump_links(const std::vector<AgentLink*>& links) {
  for (AgentLink* link : links) {
    if (link->lost) continue;
    const std::string& host = link->host();
    link->connection().pump();
    std::string diagnostics = link->connection().take_diagnostics();
    for (const std::string& text : split(diagnostics, '\n')) {
      if (!trim(text).empty()) log_->info("agent {}: {}", host, text);
    }
    Result<AgentLink::Received> received = link->receive(clock_.monotonic_ms());
    if (!received) {
      host_lost(*link, received.error().message);
      continue;
    }
    for (const std::string& problem : received->bad_frames) {
      agent_protocol_error(*link, problem);
      if (link->lost) break;
    }
    for (const json& frame : received->messages) {
      if (link->lost) break;
      // The one place an agent's frame becomes a typed message; nothing below reads raw JSON.
      Result<proto::AgentMessage> message = proto::parse_agent_message(frame);
      if (!message) {
        agent_protocol_error(*link, message.error().message);
        continue;
      }
      std::visit([&](const auto& typed) { on_agent_message(*link, typed); }, *message);
    }
    if (!link->lost && link->connection().closed()) {
      host_lost(*link, "agent connection closed: " + link->connection().close_reason());
    }
  }
}

void RunDriver::host_lost(AgentLink& link, const std::string& reason, int64_t silent_ms) {
  if (link.lost) return;
  link.lost = true;
  log_->warn("host {} lost: {}", link.host(), reason);
  link.connection().shutdown(0);
  feed(supervisor::HostLost{link.host(), reason, silent_ms});
}

void RunDriver::check_silence() {
  int64_t now = clock_.monotonic_ms();
  int64_t timeout = spec_.heartbeat.timeout.count();
  for (auto& [host, link] : links_) {
    if (link->lost || now - link->last_heard_ms() <= timeout) continue;
    // An SSH connection still being set up (or provisioning) has its own deadlines.
    if (!link->connected && !link->connection().local_pid()) continue;
    host_lost(*link, "nothing received for " + format_duration(Millis(now - link->last_heard_ms())) +
                         " (heartbeat.timeout " + format_duration(spec_.heartbeat.timeout) + ")",
              now - link->last_heard_ms());
  }
  if (now - last_ping_ms_ >= spec_.heartbeat.interval.count()) {
    last_ping_ms_ = now;
    for (auto& [host, link] : links_) {
      if (!link->lost) link->send({{"type", msg::kPing}, {"id", next_request_id_++},
                                   {"supervisor_time_ms", clock_.wall_ms()}});
    }
  }
}

// ---- agent messages: one handler per type (proto/agent_messages.h) -----------------------------

void RunDriver::agent_protocol_error(AgentLink& link, const std::string& problem) {
  int count = ++protocol_errors_["agent " + link.host()];
  if (count > kMaxProtocolErrorsPerSender) return;  // the host is lost already
  record({{"ev", "protocol.error"}, {"sender", "agent"}, {"host", link.host()}, {"error", problem},
          {"count", count}});
  if (count == 1) {
    console_.line(clock_.wall_ms(), "warning: the agent on " + link.host() +
                                        " sent a message that could not be parsed: " + problem);
  }
  if (count >= kMaxProtocolErrorsPerSender) {
    host_lost(link, "the agent sent " + std::to_string(count) + " messages that could not be parsed; the last: " +
                        problem);
  }
}

void RunDriver::worker_protocol_error(AgentLink& link, std::optional<int> gen, std::optional<int> rank,
                                      int64_t pid, const std::string& problem) {
  // Counted per worker process of a generation: a restarted rank starts again from zero.
  std::string sender = "worker " + link.host() + " pid " + std::to_string(pid);
  if (gen && rank) sender += " gen " + std::to_string(*gen) + " rank " + std::to_string(*rank);
  int count = ++protocol_errors_[sender];
  if (count > kMaxProtocolErrorsPerSender) return;  // already failed for it; the log has enough
  json event = {{"ev", "protocol.error"}, {"sender", "worker"}, {"host", link.host()}, {"pid", pid},
                {"error", problem}, {"count", count}};
  if (gen) event["gen"] = *gen;
  if (rank) event["rank"] = *rank;
  record(event);
  if (count == 1) {
    console_.line(clock_.wall_ms(), "warning: " + (rank ? "rank " + std::to_string(*rank) + " " : std::string()) +
                                        "on " + link.host() + " (pid " + std::to_string(pid) +
                                        ") sent a message that could not be parsed: " + problem +
                                        " (dropped; every further one is a protocol.error event)");
  }
  if (count == kMaxProtocolErrorsPerSender && gen && rank) {
    feed(supervisor::WorkerMisbehaved{*gen, *rank,
                                      "sent " + std::to_string(count) +
                                          " messages that could not be parsed; the last: " + problem});
  }
}

void RunDriver::on_agent_message(AgentLink& link, const proto::AgentHello& hello) {
  if (hello.protocol != proto::kProtocolVersion) {
    host_lost(link, "agent speaks protocol " + std::to_string(hello.protocol) + ", this dtrain speaks " +
                        std::to_string(proto::kProtocolVersion) + "; install dtrain " + kVersion + " there");
    return;
  }
  link.connected = true;
  link.facts = hello.facts;
  // A local agent shares our clock: a one-round-trip estimate would only add noise.
  if (!link.connection().local_pid()) {
    link.measure_offset(hello.agent_time_ms.value_or(clock_.wall_ms()), clock_.wall_ms());
  }
  // A ping now measures the clock offset from a true round trip (refine_offset) before any
  // failure has to be ordered across hosts.
  link.send({{"type", msg::kPing}, {"id", next_request_id_++}, {"supervisor_time_ms", clock_.wall_ms()}});
  (void)write_file_atomic(run_.host_facts_path(link.host()),
                          json{{"host", link.host()}, {"agent_pid", hello.pid}, {"version", hello.version},
                               {"clock_offset_ms", link.offset_ms()}, {"facts", link.facts}}
                              .dump(2, ' ', false, json::error_handler_t::replace));
  record({{"ev", "host.connected"}, {"host", link.host()}, {"agent_pid", hello.pid},
          {"version", hello.version}, {"clock_offset_ms", link.offset_ms()}});
  json facts = {{"ev", "host.facts"}, {"host", link.host()}};
  for (const char* key : {"hostname", "os", "arch", "cpus", "memory_mb", "gpus"}) {
    if (link.facts.contains(key)) facts[key] = link.facts[key];
  }
  record(facts);
  feed(supervisor::HostConnected{link.host()});
}

void RunDriver::on_agent_message(AgentLink&, const proto::WorkerStartedReport& started) {
  feed(supervisor::WorkerStarted{started.gen, started.rank, static_cast<int>(started.pid)});
}

void RunDriver::on_agent_message(AgentLink& link, const proto::WorkerSpawnFailedReport& failed) {
  record({{"ev", "worker.spawn_failed"}, {"rank", failed.rank}, {"host", link.host()}, {"error", failed.error}});
  feed(supervisor::WorkerSpawnFailed{failed.gen, failed.rank, failed.error});
}

void RunDriver::on_agent_message(AgentLink& link, const proto::WorkerExitReport& exit) {
  json event = {{"ev", "worker.exit"}, {"gen", exit.gen}, {"rank", exit.rank}, {"host", link.host()},
                {"pid", exit.pid}};
  const plan::RankPlan& plan = supervisor_.current_plan();
  if (exit.rank < static_cast<int>(plan.ranks.size())) {
    event["local_rank"] = plan.ranks[static_cast<size_t>(exit.rank)].local_rank;
  }
  std::optional<int> code;
  std::optional<std::string> signal_name;
  if (exit.signal) {
    signal_name = exit.signal_name.value_or("signal " + std::to_string(*exit.signal));
    event["signal"] = *signal_name;
  } else {
    code = exit.code.value_or(-1);
    event["code"] = *code;
  }
  event["log"] = log_path(exit.rank);
  event["tail"] = exit.tail;
  exit_tails_[exit.rank] = exit.tail;
  supervisor::WorkerExited exited;
  exited.gen = exit.gen;
  exited.rank = exit.rank;
  exited.pid = static_cast<int>(exit.pid);
  exited.code = code;
  exited.signal = signal_name;
  exited.observed_uncertainty_ms = link.offset_uncertainty_ms();
  if (exit.error) {  // the rank's TORCHELASTIC_ERROR_FILE: the exception, not just the exit code
    event["error"] = {{"message", exit.error->message}};
    if (exit.error->type) event["error"]["type"] = *exit.error->type;
    if (exit.error->traceback) event["error"]["traceback"] = *exit.error->traceback;
    if (exit.error->timestamp) event["error"]["timestamp"] = *exit.error->timestamp;
    exited.error_type = exit.error->type;
    exited.error_message = exit.error->message;
    exited.traceback = exit.error->traceback;
  }
  record(event);
  store_.forget({link.host(), exit.rank});  // its pending waits would be answered to nobody
  exited.observed_ms = link.to_supervisor_time(exit.agent_time_ms.value_or(clock_.wall_ms()));
  feed(exited);
}

void RunDriver::on_agent_message(AgentLink& link, const proto::WorkerLogLine& log) {
  (void)rank_logs_.append(log.rank, log.gen, log.line + "\n", clock_.wall_ms());
  if (log.line.find("NCCL WARN") == std::string::npos) return;
  // The first warning of a rank is an event at once; its repeats within kCommWarnWindowMs are
  // counted into one event at the window's end (flush_comm_warns): a communicator in trouble
  // can print thousands a second, on every rank.
  int64_t now = clock_.monotonic_ms();
  CommWarnWindow& window = comm_warns_[log.rank];
  if (window.started_ms != 0 && now - window.started_ms < kCommWarnWindowMs) {
    ++window.repeated;
    window.gen = log.gen;
    window.host = link.host();
    window.last_line = log.line;
    return;
  }
  flush_comm_warn(log.rank, window);
  window = CommWarnWindow{now, 0, log.gen, link.host(), ""};
  record({{"ev", "comm.warn"}, {"gen", log.gen}, {"rank", log.rank}, {"host", link.host()}, {"line", log.line}});
}

void RunDriver::flush_comm_warn(int rank, CommWarnWindow& window) {
  if (window.repeated > 0) {
    record({{"ev", "comm.warn"}, {"gen", window.gen}, {"rank", rank}, {"host", window.host},
            {"line", window.last_line}, {"repeated", window.repeated},
            {"window_s", static_cast<double>(kCommWarnWindowMs) / 1000.0},
            {"detail", std::to_string(window.repeated) + " more NCCL WARN lines from this rank within " +
                           format_duration(Millis(kCommWarnWindowMs)) + "; the last is shown (all are in its log)"}});
  }
  window.started_ms = 0;
  window.repeated = 0;
}

void RunDriver::flush_comm_warns(bool all) {
  int64_t now = clock_.monotonic_ms();
  for (auto& [rank, window] : comm_warns_) {
    if (window.started_ms != 0 && (all || now - window.started_ms >= kCommWarnWindowMs)) flush_comm_warn(rank, window);
  }
}

void RunDriver::on_agent_message(AgentLink& link, const proto::SampleReply& sample) {
  if (sample.text) {
    save_sample(sample.gen, sample.rank, link.host(), static_cast<int>(sample.pid), *sample.text);
  } else {
    record({{"ev", "worker.sample"}, {"rank", sample.rank}, {"host", link.host()}, {"pid", sample.pid},
            {"error", sample.error.value_or("the agent sent a sample without text")}});
  }
}

void RunDriver::on_agent_message(AgentLink&, const proto::PortReply& port) {
  if (port.id == pending_port_id_ && pending_start_) spawn_generation(port.port);
}

void RunDriver::on_agent_message(AgentLink& link, const proto::Released& released) {
  record({{"ev", "resources.released"}, {"gen", released.gen}, {"host", link.host()},
          {"killed", released.killed}, {"remaining", released.remaining}, {"ms", released.ms}});
  feed(supervisor::GenerationReleased{released.gen, link.host()});
}

void RunDriver::on_agent_message(AgentLink& link, const proto::AgentError& error) {
  log_->error("agent {}: {}", link.host(), error.message);
  record({{"ev", "agent.error"}, {"host", link.host()}, {"message", error.message}});
  // A launch step the agent could not do ends the generation now rather than at its deadline.
  if (error.about == msg::kReservePort && pending_start_ &&
      pending_start_->plan.ranks.at(0).host == link.host()) {
    int gen = pending_start_->gen;
    pending_start_.reset();
    feed(supervisor::LaunchStepFailed{gen, link.host(), "port reservation", error.message});
  }
}

void RunDriver::on_agent_message(AgentLink& link, const proto::Pong& pong) {
  if (!pong.supervisor_time_ms || !pong.agent_time_ms) return;
  int64_t before = link.offset_ms();
  link.refine_offset(*pong.supervisor_time_ms, *pong.agent_time_ms, clock_.wall_ms());
  if (std::abs(link.offset_ms() - before) >= 10) {
    log_->info("host {}: clock offset {} ms (was {} ms; measured by ping round trip)", link.host(),
               link.offset_ms(), before);
  }
}

void RunDriver::on_agent_message(AgentLink& link, const proto::AgentBye& bye) {
  log_->info("agent {} said bye: {}", link.host(), bye.reason);
}

void RunDriver::on_agent_message(AgentLink& link, const proto::AgentBeat& beat) {
  // Any frame proves liveness (receive() noted it); a beat also says which workers are stopped.
  for (const proto::AgentWorkerState& worker : beat.workers) {
    if (worker.state == "T") feed(supervisor::WorkerStoppedSeen{worker.gen, worker.rank});
  }
  for (const proto::FromWorker& held : beat.worker_beats) on_agent_message(link, held);
}

void RunDriver::on_agent_message(AgentLink& link, const proto::WorkerProtocolError& error) {
  worker_protocol_error(link, error.gen, error.rank, error.pid,
                        error.closed ? error.error + " (the agent closed the connection)" : error.error);
}

void RunDriver::on_agent_message(AgentLink& link, const proto::FromWorker& from) {
  // The agent parsed the worker's line already, but an agent is a peer too: parse again.
  Result<proto::WorkerMessage> parsed = proto::parse_worker_message(from.msg);
  if (!parsed) {
    worker_protocol_error(link, from.gen, from.rank, from.pid.value_or(0), parsed.error().message);
    // A request with a usable id still gets an answer, so the worker fails fast instead of
    // waiting out its own timeout for a reply that would never come.
    std::optional<int64_t> id = json_int(from.msg, "id");
    if (id) {
      send_store_replies({{{link.host(), from.rank}, from.gen,
                           json{{"type", contract::wire::kError}, {"id", *id}, {"error", parsed.error().message}}}});
    }
    return;
  }
  std::visit([&](const auto& typed) { on_worker_message(link, from, typed); }, *parsed);
}

// ---- worker messages, as forwarded by an agent --------------------------------------------------

void RunDriver::on_worker_message(AgentLink&, const proto::FromWorker& from, const proto::WorkerBeat& beat) {
  if (from.gen != supervisor_.generation() || from.rank >= static_cast<int>(metrics_.size())) return;
  RankMetrics& metrics = metrics_[static_cast<size_t>(from.rank)];
  metrics.last_beat_wall_ms = clock_.wall_ms();
  metrics.speaks_protocol = true;
  if (beat.loss) metrics.loss = *beat.loss;
  if (beat.step_ms) metrics.step_ms = *beat.step_ms;
  std::optional<bool> in_checkpoint;
  if (beat.phase) in_checkpoint = *beat.phase == proto::WorkerPhase::checkpoint;
  feed(supervisor::WorkerProgress{from.gen, from.rank, beat.step, in_checkpoint});
}

void RunDriver::on_worker_message(AgentLink&, const proto::FromWorker& from, const proto::WorkerHello&) {
  if (from.gen == supervisor_.generation() && from.rank < static_cast<int>(metrics_.size())) {
    metrics_[static_cast<size_t>(from.rank)].speaks_protocol = true;
  }
}

void RunDriver::on_worker_message(AgentLink&, const proto::FromWorker& from, const proto::CommReady&) {
  if (from.gen == supervisor_.generation()) feed(supervisor::WorkerCommReady{from.gen, from.rank});
}

void RunDriver::on_worker_message(AgentLink& link, const proto::FromWorker& from,
                                  const proto::CheckpointCommittedReport& committed) {
  record({{"ev", "checkpoint.committed"}, {"gen", from.gen}, {"rank", from.rank}, {"host", link.host()},
          {"step", committed.step}, {"bytes", committed.bytes}, {"seconds", committed.ms / 1000.0}});
  last_checkpoint_step_ = std::max(last_checkpoint_step_, committed.step);
  feed(supervisor::CheckpointCommitted{from.gen, committed.step});
}

void RunDriver::on_worker_message(AgentLink& link, const proto::FromWorker& from,
                                  const proto::CheckpointRejectedReport& rejected) {
  record({{"ev", "checkpoint.rejected"}, {"gen", from.gen}, {"rank", from.rank}, {"host", link.host()},
          {"step", rejected.step}, {"reason", rejected.reason}});
  feed(supervisor::CheckpointRejected{from.gen, rejected.step});
}

void RunDriver::on_worker_message(AgentLink&, const proto::FromWorker&, const proto::WorkerBye&) {}

template <class StoreRequest>
void RunDriver::on_worker_message(AgentLink& link, const proto::FromWorker& from, const StoreRequest& request) {
  // kv.set/get/wait/add and gen.check: the store answers the canonical, already checked form.
  send_store_replies(store_.handle({link.host(), from.rank}, from.gen, proto::to_json(proto::WorkerMessage(request)),
                                   clock_.monotonic_ms()));
}

void RunDriver::handle_signals() {
  std::string bytes;
  bool would_block = false;
  while (read_some(signal_read_.get(), bytes, &would_block) && !would_block && !bytes.empty()) {
    if (bytes.size() > 64) break;
  }
  for (unsigned char byte : bytes) {
    ++signals_seen_;
    std::string name = byte == SIGINT ? "SIGINT" : byte == SIGTERM ? "SIGTERM" : "SIGHUP";
    if (signals_seen_ == 1) {
      console_.line(clock_.wall_ms(), "received " + name + ": stopping the run (again to force)");
      feed(supervisor::StopRequested{"received " + name});
    } else if (signals_seen_ == 2) {
      // The user insists: skip the grace period.
      console_.line(clock_.wall_ms(), "received " + name + " again: killing workers now");
      for (auto& [host, link] : links_) {
        if (!link->lost) link->send({{"type", msg::kKill}, {"gen", -1}, {"signal", "KILL"}, {"grace_ms", 0}});
      }
    }
  }
}

ControlReply RunDriver::handle_control(const ControlRequest& request) {
  switch (request.type) {
    case ControlRequestType::stop:
      feed(supervisor::StopRequested{"dtrain stop"});
      return {true, supervisor::to_string(supervisor_.state()), supervisor_.generation(), ""};
    case ControlRequestType::status:
      return {true, supervisor::to_string(supervisor_.state()), supervisor_.generation(), ""};
  }
  return {false, "", std::nullopt, "internal bug: unhandled control request"};
}

// ---- outputs ----------------------------------------------------------------------------------

void RunDriver::feed(const supervisor::Event& event) {
  std::vector<supervisor::Action> actions = supervisor_.on_event(event);
  for (const supervisor::Action& action : actions) perform(action);
}

void RunDriver::record(json event) {
  int64_t wall = clock_.wall_ms();
  std::string name = event.value("ev", "");
  if (Status written = events_.append(event, wall); !written) {
    log_->error("events.jsonl: {}", written.error().message);
  }
  json copy = event;
  copy.erase("ev");
  copy.erase("tail");
  log_->info("{} {}", name, copy.dump());
}

void RunDriver::perform(const supervisor::Action& action) {
  if (const auto* event = std::get_if<supervisor::RecordEvent>(&action)) {
    record(event->event);
    if (event->event.value("ev", "") == "run.state") {
      console_.line(clock_.wall_ms(), event->event.value("state", "") + ": " + event->event.value("why", ""));
    } else if (event->event.value("ev", "") == "failure.detected") {
      console_.line(clock_.wall_ms(), "failure: " + event->event.value("kind", "") + " on " +
                                          event->event.value("host", "") +
                                          (event->event.contains("rank")
                                               ? " rank " + std::to_string(event->event.value("rank", -1))
                                               : "") +
                                          ": " + event->event.value("detail", ""));
    }
    // At once when the run's state changed, else at most every 500 ms (the loop catches up):
    // one write per event was O(ranks) per event — O(ranks²) fsync'd bytes for one generation.
    write_state(false);
  } else if (const auto* start = std::get_if<supervisor::StartGeneration>(&action)) {
    start_generation(*start);
  } else if (const auto* stop = std::get_if<supervisor::StopGeneration>(&action)) {
    pending_start_.reset();
    for (const std::string& host : stop->hosts) {
      auto link = links_.find(host);
      if (link == links_.end() || link->second->lost) {
        feed(supervisor::GenerationReleased{stop->gen, host});
        continue;
      }
      link->second->send({{"type", msg::kKill}, {"gen", stop->gen}, {"signal", "TERM"},
                          {"grace_ms", stop->grace_ms}});
    }
  } else if (const auto* sample = std::get_if<supervisor::CaptureSample>(&action)) {
    capture_sample(*sample);
  } else if (const auto* finish = std::get_if<supervisor::FinishRun>(&action)) {
    finished_ = *finish;
  }
}

void RunDriver::capture_sample(const supervisor::CaptureSample& sample) {
  // Bounded so that neither we nor the agent look silent (the agent also caps it at its
  // heartbeat timeout / 2).
  Millis gdb_timeout(std::clamp<int64_t>(spec_.heartbeat.timeout.count() / 2, 500, 5000));
  auto link = links_.find(sample.host);
  if (link == links_.end() || link->second->lost) {
    record({{"ev", "worker.sample"}, {"rank", sample.rank}, {"host", sample.host}, {"pid", sample.pid},
            {"error", "host " + sample.host + " is not connected; no sample"}});
    return;
  }
  // Every host's agent samples its own worker, the launch node's too: the supervisor's loop never
  // blocks on gdb. Sent before the kill; the agent handles frames in order, so it samples the
  // hung process before it stops it. Its answer is a sample frame (handle_frame).
  link->second->send({{"type", msg::kSample}, {"id", next_request_id_++}, {"gen", sample.gen},
                      {"rank", sample.rank}, {"pid", sample.pid}, {"timeout_ms", gdb_timeout.count()}});
}

void RunDriver::save_sample(int gen, int rank, const std::string& host, int pid, const std::string& text) {
  std::string directory = run_.path() + "/samples";
  (void)make_directories(directory, 0700);
  std::string path = directory + "/gen" + std::to_string(gen) + "-rank" + std::to_string(rank) + ".txt";
  json event = {{"ev", "worker.sample"}, {"rank", rank}, {"host", host}, {"pid", pid}};
  if (Status written = write_file_atomic(path, text); !written) {
    event["error"] = written.error().message;
  } else {
    event["path"] = path;
    event["bytes"] = text.size();
  }
  record(event);
}

void RunDriver::send_store_replies(const std::vector<store::StoreReply>& replies) {
  for (const store::StoreReply& reply : replies) {
    auto target = links_.find(reply.to.host);
    if (target == links_.end() || target->second->lost) continue;
    target->second->send({{"type", msg::kToWorker}, {"gen", reply.gen}, {"rank", reply.to.rank},
                          {"msg", reply.msg}});
  }
}

void RunDriver::start_generation(const supervisor::StartGeneration& start) {
  send_store_replies(store_.begin_generation(start.gen, clock_.monotonic_ms()));
  metrics_.assign(start.plan.ranks.size(), RankMetrics{});
  (void)write_file_atomic(run_.plan_path(start.gen), plan::to_json(start.plan).dump(2));
  log_->info("generation {} plan:\n{}", start.gen, plan::to_text(start.plan));
  pending_start_ = start;
  const std::string& rank0_host = start.plan.ranks.at(0).host;
  auto link = links_.find(rank0_host);
  if (link == links_.end() || link->second->lost) {
    feed(supervisor::HostLost{rank0_host, "not connected when generation " + std::to_string(start.gen) + " started"});
    return;
  }
  pending_port_id_ = next_request_id_++;
  link->second->send({{"type", msg::kReservePort}, {"id", pending_port_id_}});
}

void RunDriver::spawn_generation(int port) {
  supervisor::StartGeneration start = *pending_start_;
  pending_start_.reset();
  const plan::RankPlan& plan = start.plan;

  GenerationContext context;
  context.run_id = run_.id();
  context.generation = start.gen;
  context.restart_count = start.restart_count;
  context.resume_step = start.resume_step;
  context.master_addr = master_address(spec_, plan, master_address_facts(plan));
  context.master_port = port;
  bool all_have_gpus = true;
  for (const plan::PlanHost& host : plan.hosts) {
    auto link = links_.find(host.entry.name);
    if (link == links_.end() || !link->second->facts.contains("gpus") ||
        link->second->facts["gpus"].empty()) {
      all_have_gpus = false;
    }
  }
  context.backend = spec_.worker.backend == spec::Backend::gloo   ? "gloo"
                    : spec_.worker.backend == spec::Backend::nccl ? "nccl"
                    : all_have_gpus                                ? "nccl"
                                                                   : "gloo";
  context.checkpoint_dir = spec_.checkpoint.dir.empty() ? run_.path() + "/checkpoints" : spec_.checkpoint.dir;
  context.omp_threads_set = std::getenv(contract::env::kOmpNumThreads) != nullptr;
  EnvMap common = common_worker_env(spec_, plan, context);
  std::string workdir = spec_.worker.workdir;

  for (const plan::PlanHost& host : plan.hosts) {
    auto link = links_.find(host.entry.name);
    bool host_has_gpus = link != links_.end() && link->second->facts.contains("gpus") &&
                         link->second->facts["gpus"].is_array() && !link->second->facts["gpus"].empty();
    json workers = json::array();
    for (int rank : host.ranks) {
      const plan::RankSlot& slot = plan.ranks.at(static_cast<size_t>(rank));
      EnvMap env = rank_worker_env(plan, slot);
      env.merge(device_worker_env(spec_, plan, slot, context.backend == "nccl" || host_has_gpus));
      workers.push_back({{"rank", rank}, {"local_rank", slot.local_rank}, {"env", env}});
    }
    if (link == links_.end() || link->second->lost) continue;
    link->second->send({{"type", msg::kSpawn}, {"gen", start.gen}, {"argv", spec_.worker.command},
                        {"workdir", workdir}, {"env", common}, {"workers", workers},
                        {"log_tail_lines", 20}, {"instrument", spec_.worker.instrument}});
  }
  record({{"ev", "generation.spawned"}, {"gen", start.gen}, {"master_addr", context.master_addr},
          {"master_port", port}, {"backend", context.backend}, {"resume_step", start.resume_step},
          {"checkpoint_dir", context.checkpoint_dir}});
  feed(supervisor::GenerationSpawned{start.gen});
}

MasterAddressFacts RunDriver::master_address_facts(const plan::RankPlan& plan) {
  bool remote_hosts = std::any_of(plan.hosts.begin(), plan.hosts.end(),
                                  [](const plan::PlanHost& host) { return !host.entry.is_local(); });
  bool rank0_local = plan.hosts.at(static_cast<size_t>(plan.ranks.at(0).host_index)).entry.is_local();
  if (!remote_hosts || !rank0_local) return {};  // master_address() needs no facts then
  if (!launch_node_facts_) {
    // Once per run: a name lookup (usually /etc/hosts) is too slow to repeat on the loop.
    MasterAddressFacts facts;
    facts.launch_hostname = this_hostname();
    facts.launch_hostname_routable = !facts.launch_hostname.empty() && resolves_beyond_loopback(facts.launch_hostname);
    launch_node_facts_ = facts;
  }
  MasterAddressFacts facts = *launch_node_facts_;
  for (const plan::PlanHost& host : plan.hosts) {
    auto link = links_.find(host.entry.name);
    if (host.entry.is_local() || link == links_.end() || link->second->lost) continue;
    facts.ssh_source_address = link->second->connection().local_address();
    if (!facts.ssh_source_address.empty()) break;
  }
  log_->info("MASTER_ADDR facts: hostname {} ({}), ssh source address {}", facts.launch_hostname,
             facts.launch_hostname_routable ? "resolves beyond loopback" : "does not resolve beyond loopback",
             facts.ssh_source_address.empty() ? "unknown" : facts.ssh_source_address);
  return facts;
}

void RunDriver::write_state(bool force) {
  int64_t now = clock_.monotonic_ms();
  std::string state_name = supervisor::to_string(supervisor_.state());
  if (!force && state_name == last_state_name_ && now - last_state_write_ms_ < state_write_spacing_ms_) return;
  last_state_write_ms_ = now;
  last_state_name_ = state_name;

  const plan::RankPlan& plan = supervisor_.current_plan();
  json hosts = json::array();
  std::vector<spec::HostEntry> all_hosts = spec_.hosts;
  all_hosts.insert(all_hosts.end(), spec_.spares.begin(), spec_.spares.end());
  for (const spec::HostEntry& host : all_hosts) {
    std::string host_state = "connecting";
    auto link = links_.find(host.name);
    if (supervisor_.excluded_hosts().count(host.name)) host_state = "excluded";
    else if (link == links_.end() || link->second->lost) host_state = "lost";
    else if (link->second->connected) host_state = "connected";
    json entry = {{"name", host.name}, {"state", host_state}, {"spare", host.spare}};
    if (link != links_.end() && link->second->connection().local_pid()) {
      entry["agent_pid"] = *link->second->connection().local_pid();
    }
    hosts.push_back(entry);
  }
  json ranks = json::array();
  const auto& statuses = supervisor_.ranks();
  for (size_t i = 0; i < statuses.size() && i < plan.ranks.size(); ++i) {
    const supervisor::RankStatus& status = statuses[i];
    const plan::RankSlot& slot = plan.ranks[i];
    json rank = {{"rank", slot.rank}, {"host", slot.host}, {"local_rank", slot.local_rank},
                 {"dp", slot.dp}, {"pp", slot.pp}, {"tp", slot.tp},
                 {"pid", status.pid ? json(status.pid) : json(nullptr)},
                 {"state", supervisor::to_string(status.state)},
                 {"step", status.step >= 0 ? json(status.step) : json(nullptr)},
                 {"last_beat_ms", nullptr}, {"loss", nullptr}, {"exit", nullptr}};
    if (i < metrics_.size()) {
      if (metrics_[i].last_beat_wall_ms) rank["last_beat_ms"] = metrics_[i].last_beat_wall_ms;
      if (metrics_[i].loss) rank["loss"] = *metrics_[i].loss;
      if (metrics_[i].step_ms) rank["step_ms"] = *metrics_[i].step_ms;
    }
    if (status.exit_signal) rank["exit"] = {{"signal", *status.exit_signal}};
    else if (status.exit_code) rank["exit"] = {{"code", *status.exit_code}};
    ranks.push_back(rank);
  }
  json root_cause = nullptr;
  if (const auto& cause = supervisor_.root_cause()) {
    root_cause = {{"kind", cause->kind}, {"host", cause->host}, {"message", cause->detail}};
    if (cause->rank >= 0) {
      root_cause["rank"] = cause->rank;
      root_cause["local_rank"] = cause->local_rank;
      root_cause["log"] = log_path(cause->rank);
    }
    if (cause->pid) root_cause["pid"] = cause->pid;
    if (cause->code) root_cause["code"] = *cause->code;
    if (cause->signal) root_cause["signal"] = *cause->signal;
    if (cause->traceback) root_cause["traceback"] = *cause->traceback;
  }
  json state = {
      {"version", kRunStateVersion}, {"run_id", run_.id()}, {"name", spec_.name},
      {"tenant", spec_.tenant.empty() ? json(nullptr) : json(spec_.tenant)},
      {"state", state_name},
      {"exit_code", finished_ ? json(to_int(finished_->exit_code)) : json(nullptr)},
      {"generation", std::max(0, supervisor_.generation())}, {"world_size", plan.world_size},
      {"restarts", supervisor_.restarts()}, {"hosts", hosts},
      {"excluded_hosts", json(std::vector<std::string>(supervisor_.excluded_hosts().begin(),
                                                       supervisor_.excluded_hosts().end()))},
      {"supervisor", {{"pid", ::getpid()}, {"hostname", this_hostname()},
                      {"started_at_ms", resumed_ ? resumed_wall_ms_ : submitted_wall_ms_},
                      {"proc_start_ticks", current_process_start_ticks()}}},
      {"submitted_at_ms", submitted_wall_ms_},
      {"resumed_at_ms", resumed_ ? json(resumed_wall_ms_) : json(nullptr)},
      {"finished_at_ms", finished_ ? json(clock_.wall_ms()) : json(nullptr)},
      {"updated_at_ms", clock_.wall_ms()},
      {"ranks", ranks},
      {"last_recovery", supervisor_.last_recovery().is_null() ? json(nullptr) : supervisor_.last_recovery()},
      {"last_checkpoint_step", last_checkpoint_step_ >= 0 ? json(last_checkpoint_step_) : json(nullptr)},
      {"root_cause", root_cause}, {"spec_path", run_.spec_path()}, {"detached", detached_}};
  state_writer_.submit(std::move(state));
  // Building the snapshot is O(ranks) on the loop: at most ~2% of the loop's time goes to it.
  state_write_spacing_ms_ = std::max<int64_t>(kStateWriteSpacingMs, 50 * (clock_.monotonic_ms() - now));
}

void RunDriver::flush_state() {
  if (Status written = state_writer_.flush(); !written) log_->error("state.json: {}", written.error().message);
}

/// metrics.jsonl: every 5 s while workers report, and once at the end. Up to kMetricsDetailRanks
/// ranks, each rank's step, loss and step time; beyond that a summary (ranks reporting, min /
/// median / max of step, step time and loss) and only the ranks that stand out — lagging more
/// than one step behind the newest, or stepping 1.5 × slower than the median — at most
/// kMetricsDetailRanks of them, worst first: every rank every 5 s is ~1 MB at 16,384 ranks.
/// At kMetricsMaxBytes the file becomes metrics.1.jsonl (replacing an older one).
void RunDriver::write_metrics(bool force) {
  int64_t now = clock_.monotonic_ms();
  if (!force && now - last_metrics_ms_ < 5000) return;
  struct Sample {
    int rank;
    int64_t step;
    std::optional<double> step_ms, loss;
  };
  std::vector<Sample> samples;
  const auto& statuses = supervisor_.ranks();
  for (size_t i = 0; i < statuses.size() && i < metrics_.size(); ++i) {
    if (statuses[i].step < 0) continue;
    samples.push_back({static_cast<int>(i), statuses[i].step, metrics_[i].step_ms, metrics_[i].loss});
  }
  if (samples.empty()) return;
  last_metrics_ms_ = now;
  auto entry = [](const Sample& sample) {
    json rank = {{"rank", sample.rank}, {"step", sample.step}};
    if (sample.loss) rank["loss"] = *sample.loss;
    if (sample.step_ms) rank["step_ms"] = *sample.step_ms;
    return rank;
  };
  json line = {{"ts", format_timestamp_utc(clock_.wall_ms())}, {"gen", supervisor_.generation()}};
  if (statuses.size() <= kMetricsDetailRanks) {  // by world size: one format for the whole run
    json ranks = json::array();
    for (const Sample& sample : samples) ranks.push_back(entry(sample));
    line["ranks"] = std::move(ranks);
  } else {
    auto spread = [](std::vector<double> values) -> json {
      if (values.empty()) return nullptr;
      std::sort(values.begin(), values.end());
      return {{"min", values.front()}, {"median", values[values.size() / 2]}, {"max", values.back()}};
    };
    std::vector<double> steps, step_times, losses;
    for (const Sample& sample : samples) {
      steps.push_back(static_cast<double>(sample.step));
      if (sample.step_ms) step_times.push_back(*sample.step_ms);
      if (sample.loss) losses.push_back(*sample.loss);
    }
    json step_spread = spread(steps);
    json time_spread = spread(step_times);
    line["ranks_reporting"] = samples.size();
    line["step"] = step_spread;
    line["step_ms"] = time_spread;
    line["loss"] = spread(losses);
    double newest = step_spread["max"].get<double>();
    double median_ms = time_spread.is_null() ? 0.0 : time_spread["median"].get<double>();
    std::vector<Sample> outliers;
    for (const Sample& sample : samples) {
      bool lagging = static_cast<double>(sample.step) < newest - 1;
      bool slow = median_ms > 0 && sample.step_ms && *sample.step_ms > 1.5 * median_ms;
      if (lagging || slow) outliers.push_back(sample);
    }
    std::sort(outliers.begin(), outliers.end(), [](const Sample& a, const Sample& b) {
      return std::make_pair(a.step, -a.step_ms.value_or(0)) < std::make_pair(b.step, -b.step_ms.value_or(0));
    });
    line["outliers_total"] = outliers.size();
    json shown = json::array();
    for (size_t i = 0; i < outliers.size() && i < kMetricsDetailRanks; ++i) shown.push_back(entry(outliers[i]));
    line["outliers"] = std::move(shown);
  }
  std::string path = run_.path() + "/metrics.jsonl";
  struct stat info {};
  if (::stat(path.c_str(), &info) == 0 && static_cast<uint64_t>(info.st_size) >= kMetricsMaxBytes) {
    (void)::rename(path.c_str(), (run_.path() + "/metrics.1.jsonl").c_str());
  }
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600));
  if (fd.valid()) (void)write_all(fd.get(), line.dump() + "\n");
}

void RunDriver::show_status() {
  ConsoleStatus status;
  status.state = supervisor::to_string(supervisor_.state());
  status.generation = std::max(0, supervisor_.generation());
  status.world_size = supervisor_.current_plan().world_size;
  for (size_t i = 0; i < supervisor_.ranks().size(); ++i) {
    const supervisor::RankStatus& rank = supervisor_.ranks()[i];
    if (rank.state == supervisor::RankState::running) ++status.workers_running;
    if (rank.step > status.step) {
      status.step = rank.step;
      if (i < metrics_.size() && metrics_[i].loss) {
        status.loss = *metrics_[i].loss;
        status.has_loss = true;
      }
    }
  }
  console_.status(clock_.monotonic_ms(), clock_.wall_ms(), status);
}

// The traceback from the rank's error file, its last lines (the innermost frames and the
// exception): the whole one is in events.jsonl (failure.detected) and state.json.
static void print_traceback(std::FILE* out, const std::string& traceback) {
  constexpr size_t kShownLines = 12;
  std::vector<std::string> lines;
  size_t start = 0;
  while (start < traceback.size()) {
    size_t end = traceback.find('\n', start);
    if (end == std::string::npos) end = traceback.size();
    lines.push_back(traceback.substr(start, end - start));
    start = end + 1;
  }
  std::fprintf(out, "  traceback (from its error file):\n");
  if (lines.size() > kShownLines) std::fprintf(out, "    ...\n");
  for (size_t i = lines.size() > kShownLines ? lines.size() - kShownLines : 0; i < lines.size(); ++i) {
    std::fprintf(out, "    %s\n", lines[i].c_str());
  }
}

void RunDriver::print_summary(const supervisor::FinishRun& finish) {
  json summary = {{"ev", "run.finished"}, {"state", supervisor::to_string(finish.state)},
                  {"exit_code", to_int(finish.exit_code)}, {"restarts", supervisor_.restarts()},
                  {"generations", supervisor_.generation() + 1},
                  {"duration_ms", clock_.wall_ms() - submitted_wall_ms_}};
  if (!supervisor_.incidents().empty()) summary["incidents"] = supervisor_.incidents();
  if (const auto& cause = supervisor_.root_cause()) {
    summary["root_cause"] = {{"kind", cause->kind}, {"host", cause->host}, {"rank", cause->rank},
                             {"detail", cause->detail}};
    if (cause->traceback) summary["root_cause"]["traceback"] = *cause->traceback;
  }
  if (!supervisor_.give_up_reason().empty()) summary["reason"] = supervisor_.give_up_reason();
  record(summary);
  if (console_.mode() == Console::Mode::quiet) return;
  console_.finish();
  // Rounded to 100 ms past a second; a run that ended at once shows its real milliseconds,
  // not "0ms".
  int64_t elapsed_ms = std::max<int64_t>(1, clock_.wall_ms() - submitted_wall_ms_);
  std::string duration = format_duration(Millis(elapsed_ms < 1000 ? elapsed_ms : elapsed_ms / 100 * 100));
  std::FILE* out = finish.exit_code == ExitCode::ok ? stdout : stderr;
  std::fprintf(out, "dtrain: run %s %s after %s (exit %d)\n", run_.id().c_str(),
               supervisor::to_string(finish.state), duration.c_str(), to_int(finish.exit_code));
  if (const auto& cause = supervisor_.root_cause(); cause && finish.state == RunState::failed) {
    std::fprintf(out, "root cause: ");
    if (cause->rank >= 0) {
      std::fprintf(out, "rank %d (local rank %d) on host %s, pid %d: %s\n", cause->rank,
                   cause->local_rank, cause->host.c_str(), cause->pid, cause->detail.c_str());
      std::fprintf(out, "  log: %s\n", log_path(cause->rank).c_str());
      if (cause->traceback) print_traceback(out, *cause->traceback);
      auto tail = exit_tails_.find(cause->rank);
      if (tail != exit_tails_.end() && tail->second.is_array() && !tail->second.empty()) {
        std::fprintf(out, "  last output:\n");
        size_t first = tail->second.size() > 5 ? tail->second.size() - 5 : 0;
        for (size_t i = first; i < tail->second.size(); ++i) {
          std::fprintf(out, "    %s\n", tail->second[i].get<std::string>().c_str());
        }
      }
    } else {
      std::fprintf(out, "%s on host %s: %s\n", cause->kind.c_str(), cause->host.c_str(),
                   cause->detail.c_str());
    }
  }
  if (finish.state == RunState::failed && !supervisor_.give_up_reason().empty()) {
    std::fprintf(out, "cannot continue: %s\n", supervisor_.give_up_reason().c_str());
  }
  if (supervisor_.incidents().size() > 1 || supervisor_.restarts() > 0) {
    std::fprintf(out, "incidents (%zu), restarts %d:\n", supervisor_.incidents().size(),
                 supervisor_.restarts());
    for (const json& incident : supervisor_.incidents()) {
      std::fprintf(out, "  gen %d: %s on %s%s: %s\n", incident.value("gen", 0),
                   incident.value("kind", "").c_str(), incident.value("host", "").c_str(),
                   incident.contains("rank") ? (" rank " + std::to_string(incident.value("rank", -1))).c_str() : "",
                   incident.value("detail", "").c_str());
    }
  }
  std::fprintf(out, "run log: %s\n  dtrain status %s · dtrain logs %s\n", run_.path().c_str(),
               run_.id().c_str(), run_.id().c_str());
}

// ---- the loop ---------------------------------------------------------------------------------

int RunDriver::run() {
  if (Status opened = open_logs(); !opened) {
    std::fprintf(stderr, "dtrain: %s\n", opened.error().message.c_str());
    return to_int(ExitCode::infra);
  }
  install_signal_handlers();
  if (Result<std::string> made = run_.create_runtime_dir(); !made) {
    std::fprintf(stderr, "dtrain: %s\n", made.error().message.c_str());
    return to_int(ExitCode::infra);
  }
  if (Result<ControlSocket> control = ControlSocket::open(run_.runtime_dir() + "/ctl.sock")) {
    control_.emplace(std::move(control).value());
    if (Status linked = run_.link_control_socket(run_.runtime_dir() + "/ctl.sock"); !linked) {
      log_->warn("ctl.sock link: {}", linked.error().message);
    }
  } else {
    log_->warn("control socket unavailable: {}", control.error().message);
  }
  log_->info("dtrain {} supervising run {} (pid {})", kVersion, run_.id(), ::getpid());
  write_state(true);
  flush_state();  // `dtrain resume` must find this supervisor's pid before any worker starts
  if (pending_resume_) {
    for (const supervisor::Action& action : supervisor_.resume_from(*pending_resume_)) perform(action);
    pending_resume_.reset();
  }
  start_agents();

  std::vector<AgentLink*> all_links;
  std::vector<AgentLink*> periodic_links;  // pumped every 100 ms whether or not an fd is ready
  for (auto& [host, link] : links_) {
    all_links.push_back(link.get());
    if (link->connection().needs_periodic_pump()) periodic_links.push_back(link.get());
  }
  FdWatcher link_watcher;
  std::vector<pollfd> fds;
  std::vector<AgentLink*> ready_links;
  // With hundreds of hosts a frame arrives every few microseconds, and a wakeup per frame costs
  // a poll of every fd: wakeups are spaced (1 ms per 100 hosts, at most 20 ms) so that each
  // handles a batch. Small jobs (under 100 hosts) are not delayed at all.
  const int64_t min_wakeup_spacing_ms = std::min<int64_t>(20, static_cast<int64_t>(all_links.size()) / 100);
  int64_t last_wakeup_ms = 0;
  while (!finished_) {
    if (min_wakeup_spacing_ms > 0) {
      int64_t since = clock_.monotonic_ms() - last_wakeup_ms;
      if (since < min_wakeup_spacing_ms) std::this_thread::sleep_for(Millis(min_wakeup_spacing_ms - since));
    }
    // Agent links through the epoll-backed watcher (a wait costs O(ready)); the signal pipe and
    // control sockets, with the watcher's fd, through poll.
    link_watcher.begin();
    for (AgentLink* link : all_links) {
      if (link->lost) continue;
      for (pollfd fd : link->connection().poll_fds()) link_watcher.watch(fd.fd, fd.events, link);
    }
    fds.clear();
    fds.push_back({link_watcher.end_round(), POLLIN, 0});
    if (signal_read_.valid()) fds.push_back({signal_read_.get(), POLLIN, 0});
    if (control_) control_->add_poll_fds(fds);

    int64_t now = clock_.monotonic_ms();
    // SSH connections must be pumped at least every ~100 ms for their own deadlines.
    int64_t timeout = std::min<int64_t>(spec_.heartbeat.interval.count(), 100);
    if (auto deadline = store_.next_deadline_ms()) timeout = std::min(timeout, std::max<int64_t>(0, *deadline - now));
    int ready = ::poll(fds.data(), fds.size(), static_cast<int>(timeout));
    if (ready < 0 && errno != EINTR) {
      log_->error("poll: {}", errno_text(errno));
      break;
    }
    last_wakeup_ms = clock_.monotonic_ms();
    handle_signals();
    // Only the links with something to do, and every 100 ms the ones whose transport needs it
    // (SSH sessions keep their own deadlines): a pump is a system call or more, and at
    // thousands of hosts pumping them all on every wakeup was most of the loop's CPU.
    now = clock_.monotonic_ms();
    ready_links.clear();
    if (ready > 0 && (fds[0].revents & POLLIN)) {
      for (const FdWatcher::Ready& event : link_watcher.collect()) ready_links.push_back(static_cast<AgentLink*>(event.owner));
      std::sort(ready_links.begin(), ready_links.end());  // a link with two ready fds: pumped once
      ready_links.erase(std::unique(ready_links.begin(), ready_links.end()), ready_links.end());
    }
    pump_links(ready_links);
    if (now - last_full_pump_ms_ >= 100) {  // a second pump of a link just pumped finds nothing
      last_full_pump_ms_ = now;
      pump_links(periodic_links);
    }
    if (control_) control_->pump([this](const ControlRequest& request) { return handle_control(request); });
    now = clock_.monotonic_ms();
    send_store_replies(store_.expire(now));
    if (now - last_tick_ms_ >= 100) {  // silences and ticks count in seconds: 10 looks a second
      last_tick_ms_ = now;
      check_silence();
      flush_comm_warns(false);
      feed(supervisor::Tick{});
    }
    show_status();
    write_metrics(false);
    write_state(false);
  }

  supervisor::FinishRun finish = finished_.value_or(supervisor::FinishRun{RunState::failed, ExitCode::internal});
  flush_comm_warns(true);
  write_metrics(true);
  shut_down_agents();
  print_summary(finish);
  write_state(true);
  flush_state();
  run_.unlink_control_socket();
  control_.reset();
  ::rmdir(run_.runtime_dir().c_str());
  g_signal_pipe_write = -1;
  return to_int(finish.exit_code);
}

/// Forks the supervisor into the background. In the parent: prints the run id and returns the
/// exit code for it; in the child (new session, stdio on /dev/null): returns nullopt.
std::optional<int> detach(const std::string& run_id, const char* what) {
  std::fflush(stdout);
  pid_t child = ::fork();
  if (child < 0) {
    std::fprintf(stderr, "dtrain: fork: %s\n", errno_text(errno).c_str());
    return to_int(ExitCode::infra);
  }
  if (child > 0) {
    std::printf("%s\n", run_id.c_str());
    std::fprintf(stderr, "dtrain: run %s %s in the background (supervisor pid %d)\n"
                         "  dtrain status %s · dtrain logs %s --follow · dtrain stop %s\n",
                 run_id.c_str(), what, child, run_id.c_str(), run_id.c_str(), run_id.c_str());
    return to_int(ExitCode::ok);
  }
  ::setsid();
  int null_fd = ::open("/dev/null", O_RDWR | O_CLOEXEC);
  if (null_fd >= 0) {
    ::dup2(null_fd, STDIN_FILENO);
    ::dup2(null_fd, STDOUT_FILENO);
    ::dup2(null_fd, STDERR_FILENO);
    ::close(null_fd);
  }
  return std::nullopt;
}

Console::Mode console_mode(bool detached) {
  if (detached) return Console::Mode::quiet;
  return ::isatty(STDERR_FILENO) ? Console::Mode::terminal : Console::Mode::plain;
}

}  // namespace

int submit(const SubmitOptions& options) {
  SystemClock clock;
  spec::LoadResult loaded =
      options.spec_text ? spec::parse_job_spec(*options.spec_text, options.spec_path, absolute_path("."), options.overrides)
                        : spec::load_job_spec(options.spec_path, options.overrides);
  if (!loaded.ok()) {
    std::fprintf(stderr, "%s\n", loaded.message().c_str());
    return to_int(ExitCode::usage);
  }
  spec::JobSpec spec = std::move(*loaded.spec);
  if (spec.worker.workdir.empty()) spec.worker.workdir = absolute_path(".");
  if (!spec.checkpoint.dir.empty()) spec.checkpoint.dir = absolute_path(spec.checkpoint.dir);
  Result<plan::RankPlan> plan = plan::make_plan(spec);
  if (!plan) {
    std::fprintf(stderr, "%s: %s\n", options.spec_path.c_str(), plan.error().message.c_str());
    return to_int(ExitCode::usage);
  }

  std::string run_id = make_run_id(spec.name.empty() ? "job" : spec.name, clock.wall_ms());
  Result<RunDirectory> run = RunDirectory::create(run_id);
  if (!run) {
    std::fprintf(stderr, "dtrain: %s\n", run.error().message.c_str());
    return to_int(ExitCode::infra);
  }
  Result<EventLog> events = EventLog::create(run->events_path(), run_id, clock.wall_ms());
  if (!events) {
    std::fprintf(stderr, "dtrain: %s\n", events.error().message.c_str());
    return to_int(ExitCode::infra);
  }
  (void)write_file_atomic(run->spec_path(), spec::to_yaml(spec));
  json hosts = json::array();
  for (const spec::HostEntry& host : spec.hosts) hosts.push_back(host.name);
  (void)events->append({{"ev", "run.submitted"}, {"run_id", run_id}, {"name", spec.name},
                        {"spec", options.spec_text ? run->spec_path() : absolute_path(options.spec_path)}, {"hosts", hosts},
                        {"world_size", plan->world_size}, {"dtrain_version", kVersion},
                        {"supervisor_pid", ::getpid()}, {"supervisor_host", this_hostname()},
                        {"detached", options.detach}},
                       clock.wall_ms());

  if (options.detach) {
    if (std::optional<int> parent_exit = detach(run_id, "started")) return *parent_exit;
  } else {
    std::fprintf(stderr, "dtrain: run %s · %d workers on %zu host(s) · run log %s\n", run_id.c_str(),
                 plan->world_size, plan->hosts.size(), run->path().c_str());
  }

  RunDriver driver(spec, std::move(plan).value(), std::move(run).value(), std::move(events).value(),
                   options.dtrain_exe, options.detach, Console(console_mode(options.detach), stderr));
  driver.use_transport(options.transport);
  int code = driver.run();
  if (options.detach) std::_Exit(code);
  return code;
}

}  // namespace dtrain::run

// ---- dtrain resume ----------------------------------------------------------------------------

namespace dtrain::run {

namespace {

int refuse(const std::string& message, ExitCode code = ExitCode::usage) {
  std::fprintf(stderr, "dtrain resume: %s\n", message.c_str());
  return to_int(code);
}

}  // namespace

int resume(const ResumeOptions& options) {
  SystemClock clock;
  Result<RunDirectory> run = RunDirectory::open(options.run);
  if (!run) return refuse(run.error().message);
  Result<json> state = read_state(*run);
  if (!state) return refuse("cannot read the run's state: " + state.error().message, ExitCode::infra);
  std::string previous_state = json_string(*state, "state", "unknown");
  const json* supervisor_member = json_member(*state, "supervisor");
  const json supervisor_info = supervisor_member && supervisor_member->is_object() ? *supervisor_member : json::object();
  int previous_pid = static_cast<int>(json_int(supervisor_info, "pid").value_or(0));
  std::string previous_host = json_string(supervisor_info, "hostname");
  bool terminal = is_terminal_state(previous_state);
  if (previous_state == "succeeded") {
    return refuse("run " + run->id() + " already succeeded; nothing to resume (submit the spec again for a new run)");
  }
  if (!terminal && supervisor_alive(*state)) {
    if (!previous_host.empty() && previous_host != this_hostname()) {
      return refuse("run " + run->id() + " is supervised from host " + previous_host + " (pid " +
                    std::to_string(previous_pid) + "); whether it still runs can only be checked there: "
                    "run `dtrain resume " + run->id() + "` on " + previous_host);
    }
    return refuse("run " + run->id() + " is still supervised by pid " + std::to_string(previous_pid) +
                  " (state " + previous_state + "); nothing to resume. `dtrain stop " + run->id() +
                  "` ends it");
  }

  spec::LoadResult loaded = spec::load_job_spec(run->spec_path(), {});
  if (!loaded.ok()) return refuse("the run's saved spec cannot be loaded:\n" + loaded.message());
  spec::JobSpec spec = std::move(*loaded.spec);
  Result<plan::RankPlan> plan = plan::make_plan(spec);
  if (!plan) return refuse(run->spec_path() + ": " + plan.error().message);

  // A corrupt line (a full disk, a hand edit) is skipped with a warning; the rest still counts.
  Result<std::vector<json>> events = read_events(run->events_path(), [](const std::string& warning) {
    std::fprintf(stderr, "dtrain resume: warning: %s\n", warning.c_str());
  });
  if (!events) return refuse("cannot read the run log: " + events.error().message, ExitCode::infra);
  supervisor::ResumeFrom from = resume_point(*state, *events);
  int64_t started_wall = clock.wall_ms();
  if (from.supervisor_lost) {
    if (Status gone = wait_until_old_agents_gone(*run, spec, from.last_seen_wall_ms); !gone) {
      return refuse(gone.error().message, ExitCode::infra);
    }
  }
  from.waited_ms = clock.wall_ms() - started_wall;

  Result<EventLog> log = EventLog::open_existing(run->events_path());
  if (!log) return refuse(log.error().message, ExitCode::infra);
  int64_t resume_step = from.committed_steps.empty() ? -1 : from.committed_steps.back();
  (void)log->append({{"ev", "run.resumed"}, {"previous_state", previous_state},
                     {"previous_supervisor_pid", previous_pid}, {"previous_supervisor_host", previous_host},
                     {"waited_ms", from.waited_ms}, {"resume_step", resume_step},
                     {"gen", from.last_generation + 1}, {"supervisor_pid", ::getpid()},
                     {"supervisor_host", this_hostname()}, {"dtrain_version", kVersion},
                     {"detached", options.detach}},
                    clock.wall_ms());
  std::string resume_text = resume_step >= 0 ? "checkpoint step " + std::to_string(resume_step) : "the start (no checkpoint)";
  if (options.detach) {
    if (std::optional<int> parent_exit = detach(run->id(), ("resumed from " + resume_text).c_str())) return *parent_exit;
  } else {
    std::string why = terminal ? "it had " + previous_state
                               : "its supervisor, pid " + std::to_string(previous_pid) + " on " + previous_host + ", died";
    std::fprintf(stderr, "dtrain: resuming run %s (%s) from %s · %d workers on %zu host(s) · run log %s\n",
                 run->id().c_str(), why.c_str(),
                 resume_text.c_str(), plan->world_size, plan->hosts.size(), run->path().c_str());
  }
  int64_t submitted = json_int(*state, "submitted_at_ms").value_or(clock.wall_ms());
  RunDriver driver(spec, std::move(plan).value(), std::move(run).value(), std::move(log).value(),
                   options.dtrain_exe, options.detach, Console(console_mode(options.detach), stderr));
  driver.resume_from(from, submitted);
  int code = driver.run();
  if (options.detach) std::_Exit(code);
  return code;
}

}  // namespace dtrain::run
