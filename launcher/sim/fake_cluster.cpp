#include "launcher/sim/fake_cluster.h"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <algorithm>
#include <optional>
#include <queue>
#include <cerrno>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <utility>

#include <nlohmann/json.hpp>

#include "launcher/base/clock.h"
#include "launcher/base/fd.h"
#include "launcher/proto/frame.h"
#include "launcher/proto/agent_messages.h"
#include "launcher/proto/messages.h"
#include "launcher/proto/relay_batcher.h"
#include "launcher/proto/supervisor_messages.h"

namespace dtrain::sim {

using transport::AgentConnection;
using transport::AgentTarget;
using transport::Transport;

using nlohmann::json;

namespace {

constexpr size_t kReadChunk = 64 << 10;

/// The driver's end of a simulated agent's socketpair: a plain non-blocking byte stream.
class FakeAgentConnection final : public AgentConnection {
 public:
  FakeAgentConnection(std::string host, UniqueFd fd) : host_(std::move(host)), fd_(std::move(fd)) {}

  std::vector<pollfd> poll_fds() const override {
    if (!fd_.valid() || closed_) return {};
    return {pollfd{fd_.get(), static_cast<short>(POLLIN | (outgoing_.empty() ? 0 : POLLOUT)), 0}};
  }

  void pump() override {
    if (!fd_.valid() || closed_) return;
    write_queued();
    char buffer[kReadChunk];
    for (;;) {
      ssize_t got = ::recv(fd_.get(), buffer, sizeof buffer, 0);
      if (got > 0) {
        received_.append(buffer, static_cast<size_t>(got));
        // A short read drained the socket: the driver's poll is level-triggered and says when
        // more comes, so the recv that would answer EAGAIN is saved (2,048 of them a second).
        if (static_cast<size_t>(got) < sizeof buffer) break;
        continue;
      }
      if (got == 0) close_with("simulated host gone");
      else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) close_with(std::strerror(errno));
      break;
    }
  }

  void send(std::string bytes) override {
    if (closed_ || input_closed_) return;
    outgoing_ += bytes;
    write_queued();
  }

  std::string take_received() override { return std::exchange(received_, {}); }
  std::string take_diagnostics() override { return {}; }
  bool closed() const override { return closed_; }
  std::string close_reason() const override { return reason_; }

  void close_input() override {
    write_queued();
    input_closed_ = true;
    if (fd_.valid()) ::shutdown(fd_.get(), SHUT_WR);
  }

  void shutdown(int) override {
    if (!fd_.valid()) return;
    close_input();
    fd_.reset();
    if (!closed_) close_with("shut down");
  }

  std::optional<pid_t> local_pid() const override { return std::nullopt; }
  bool needs_periodic_pump() const override { return false; }  // a socketpair: readiness is all
  std::string describe() const override { return host_ + " (simulated agent)"; }

 private:
  void write_queued() {
    while (!outgoing_.empty() && fd_.valid()) {
      ssize_t wrote = ::send(fd_.get(), outgoing_.data(), outgoing_.size(), MSG_NOSIGNAL);
      if (wrote > 0) {
        outgoing_.erase(0, static_cast<size_t>(wrote));
        continue;
      }
      if (wrote < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
      close_with(std::string("send: ") + std::strerror(errno));
      return;
    }
  }
  void close_with(std::string reason) {
    if (closed_) return;
    closed_ = true;
    reason_ = std::move(reason);
  }

  std::string host_;
  UniqueFd fd_;
  std::string outgoing_, received_, reason_;
  bool closed_ = false;
  bool input_closed_ = false;
};

struct SimWorker {
  int gen = 0;
  int rank = 0;
  int local_rank = 0;
  int64_t pid = 0;
  int64_t step = 0;
  bool hung = false;
  bool saving = false;  ///< in a checkpoint save: beats say phase "checkpoint" and the step stands
};

/// The SSH sessions one initiator opens, `max_parallel` at a time, each `setup_ms` long.
class SessionLanes {
 public:
  /// When a session asked for at `now` is up.
  int64_t next_ready(int64_t now, int64_t setup_ms, int max_parallel) {
    if (setup_ms <= 0) return now;
    int64_t start = now;
    if (static_cast<int>(busy_until_.size()) >= std::max(1, max_parallel)) {
      start = std::max(now, busy_until_.top());
      busy_until_.pop();
    }
    busy_until_.push(start + setup_ms);
    return start + setup_ms;
  }

 private:
  std::priority_queue<int64_t, std::vector<int64_t>, std::greater<>> busy_until_;
};

struct SimAgent {
  std::string host;
  int index = 0;
  UniqueFd fd;
  proto::FrameDecoder decoder;
  std::string outgoing;
  bool configured = false;
  bool batch_beats = false;  ///< config batch_beats: later worker beats ride on the agent's beat
  bool partitioned = false;
  bool closing = false;  ///< flush what is queued, then close
  int64_t interval_ms = 1000;
  int64_t timeout_ms = 10'000;    ///< config heartbeat_timeout_ms: silence from the driver that fences
  int64_t last_heard_ms = 0;      ///< the driver's last frame (monotonic)
  int64_t next_beat_ms = 0;
  std::vector<SimWorker> workers;
  int64_t ready_ms = 0;          ///< its session is up (FakeClusterOptions::ssh_setup_ms): frames wait
  int64_t hello_pid = 0;
  int64_t reattach_ms = 0;       ///< config.reattach_ms
  SimAgent* relay = nullptr;     ///< the relay that carries it; null: its own socketpair
  std::vector<std::unique_ptr<SimAgent>> children;  ///< a relay's hosts (relay_open)
  std::unique_ptr<proto::RelayBatcher> batcher;     ///< a relay's: what it sends of its hosts
  SessionLanes lanes;            ///< a relay's sessions to its hosts
  int relay_max_parallel = 64;   ///< relay_open's ssh.max_parallel
  int64_t detached_since_ms = 0; ///< a re-attachable agent whose relay went: since when it waits
  std::string detach_reason;
};

}  // namespace

struct FakeCluster::Simulation {
  FakeClusterOptions options;
  SystemClock system_clock;
  const Clock* clock_ptr = &system_clock;  ///< FakeClusterOptions::clock when given
  const Clock& clock_() const { return *clock_ptr; }
  std::mutex mutex;                                  // guards commands and new_agents
  std::vector<std::function<void()>> commands;       // run on the simulation thread
  std::vector<std::unique_ptr<SimAgent>> new_agents;
  UniqueFd wake_read, wake_write;
  std::atomic<bool> stopping{false};
  std::atomic<int64_t> newest_step{0};
  std::atomic<int> newest_generation{-1};
  std::atomic<int64_t> sent{0}, received{0};
  std::atomic<int64_t> relay_batches{0}, relay_batched_messages{0};
  bool job_done = false;  ///< finish_all() ran: a worker spawned later (its spawn was on its way) ends at once
  std::atomic<int64_t> cpu_ns{0};
  std::atomic<int> silence_fences{0};
  std::atomic<int64_t> longest_silence_ms{0};  ///< longest gap between the driver's frames to one agent
  std::vector<std::unique_ptr<SimAgent>> agents;  // simulation thread only
  std::vector<std::unique_ptr<SimAgent>> detached;  // relayed agents whose relay went, waiting for an attach
  SessionLanes driver_lanes;                        // guarded by mutex (start_agent runs on the driver's thread)
  int next_index = 0;
  int64_t next_pid = 100000;
  std::thread thread;

  void post(std::function<void()> command) {
    {
      std::lock_guard lock(mutex);
      commands.push_back(std::move(command));
    }
    wake();
  }
  void wake() {
    char byte = 1;
    [[maybe_unused]] ssize_t ignored = ::write(wake_write.get(), &byte, 1);
  }

  /// Whether what `agent` says reaches the driver: its own socket, or its relay's.
  static bool reachable(const SimAgent& agent) {
    if (agent.partitioned || agent.detached_since_ms != 0) return false;
    if (agent.relay) return reachable(*agent.relay);
    return agent.fd.valid();
  }

  void emit(SimAgent& agent, const proto::AgentMessage& message) {
    if (!reachable(agent)) return;
    agent.outgoing += proto::encode_frame(proto::to_json(message));
    ++sent;
  }

  /// A relay's frames about its hosts, as the real relay sends them (proto::RelayBatcher): their
  /// beats and pongs in relay_batch, their other bytes in relay_from, and the ends of their
  /// sessions (relay_closed). Not counted in frames_sent (those count the hosts' own).
  void carry_children(SimAgent& relay) {
    if (!relay.batcher) {
      relay.batcher = std::make_unique<proto::RelayBatcher>([this, &relay](proto::AgentMessage message) {
        if (const auto* batch = std::get_if<proto::RelayBatchReport>(&message)) {
          ++relay_batches;
          relay_batched_messages += static_cast<int64_t>(batch->messages.size());
        }
        relay.outgoing += proto::encode_frame(proto::to_json(message));
      });
    }
    int64_t now = clock_().monotonic_ms();
    for (auto it = relay.children.begin(); it != relay.children.end();) {
      SimAgent& child = **it;
      if (!child.outgoing.empty()) relay.batcher->received(child.host, std::exchange(child.outgoing, {}), "", now);
      if (child.closing) {
        relay.batcher->forget(child.host);
        relay.outgoing += proto::encode_frame(proto::to_json(proto::RelayClosedReport{child.host, "agent exited (simulated)"}));
        it = relay.children.erase(it);
      } else {
        ++it;
      }
    }
    relay.batcher->flush_due(now);
  }

  void flush(SimAgent& agent) {
    if (!agent.children.empty() && !agent.partitioned && agent.fd.valid()) carry_children(agent);
    while (!agent.outgoing.empty() && agent.fd.valid() && !agent.partitioned) {
      ssize_t wrote = ::send(agent.fd.get(), agent.outgoing.data(), agent.outgoing.size(), MSG_NOSIGNAL);
      if (wrote > 0) {
        agent.outgoing.erase(0, static_cast<size_t>(wrote));
        continue;
      }
      if (wrote < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
      agent.fd.reset();  // the driver closed its end
      return;
    }
    if (agent.closing && agent.outgoing.empty()) agent.fd.reset();
  }

  proto::WorkerExitReport worker_exit(const SimWorker& worker, int64_t now_wall) {
    proto::WorkerExitReport exit;
    exit.gen = worker.gen;
    exit.rank = worker.rank;
    exit.local_rank = worker.local_rank;
    exit.pid = worker.pid;
    exit.agent_time_ms = now_wall;
    exit.code = 0;
    return exit;
  }

  /// Kills the workers of `gen` (-1: all) as the agent's kill does: exits, then released.
  std::vector<int64_t> kill_workers(SimAgent& agent, int gen, int64_t now_wall) {
    std::vector<int64_t> killed;
    std::vector<SimWorker> kept;
    for (const SimWorker& worker : agent.workers) {
      if (gen != -1 && worker.gen != gen) {
        kept.push_back(worker);
        continue;
      }
      proto::WorkerExitReport exit = worker_exit(worker, now_wall);
      exit.code.reset();
      exit.signal = 15;
      exit.signal_name = "SIGTERM";
      exit.killed_by_agent = true;
      emit(agent, exit);
      killed.push_back(worker.pid);
    }
    agent.workers = std::move(kept);
    return killed;
  }

  void on_frame(SimAgent& agent, const json& frame, int64_t now) {
    ++received;
    Result<proto::SupervisorMessage> message = proto::parse_supervisor_message(frame);
    if (!message) return;  // a real agent would fence; the driver's frames are not what is tested here
    std::visit([&](const auto& typed) { on(agent, typed, now); }, *message);
  }

  void on(SimAgent& agent, const proto::AgentConfig& config, int64_t now) {
    agent.configured = true;
    agent.batch_beats = config.batch_beats;
    agent.interval_ms = std::max<int64_t>(1, config.heartbeat_interval_ms);
    agent.timeout_ms = std::max<int64_t>(1, config.heartbeat_timeout_ms);
    // Agents beat at their own phases, spread over the interval as real ones are.
    agent.next_beat_ms = now + (agent.index * 7919) % agent.interval_ms;
    json gpus = json::array();
    for (int i = 0; i < options.gpus_per_host; ++i) {
      gpus.push_back({{"index", i}, {"name", "Simulated GPU"}, {"uuid", "GPU-sim-" + agent.host + "-" + std::to_string(i)}});
    }
    proto::AgentHello hello;
    hello.protocol = proto::kProtocolVersion;
    hello.version = "simulated";
    hello.host = agent.host;
    agent.hello_pid = 1000 + agent.index;
    agent.reattach_ms = config.reattach_ms.value_or(0);
    hello.pid = agent.hello_pid;
    hello.agent_time_ms = clock_().wall_ms();
    hello.socket = "/simulated/" + agent.host + "/agent.sock";
    if (agent.reattach_ms > 0) hello.attach_socket = attach_socket_of(agent.host);
    hello.facts = {{"hostname", agent.host}, {"os", "Linux (simulated)"}, {"arch", "x86_64"},
                   {"cpus", 96},          {"memory_mb", 2'000'000},     {"gpus", gpus}};
    emit(agent, hello);
    // A simulated host has nothing to check: its `start` checks come back empty at once.
    if (config.health) emit(agent, proto::HealthReply{0, proto::HealthReport{proto::health_moment::kStart, {}, 0}});
  }
  void on(SimAgent& agent, const proto::PingRequest& ping, int64_t) {
    emit(agent, proto::Pong{ping.id.value_or(0), clock_().wall_ms(), ping.supervisor_time_ms.value_or(0)});
  }
  void on(SimAgent& agent, const proto::ReservePortRequest& reserve, int64_t) {
    emit(agent, proto::PortReply{reserve.id.value_or(0), 29500});
  }
  void on(SimAgent& agent, const proto::SpawnRequest& spawn, int64_t) {
    int64_t wall = clock_().wall_ms();
    int gen = spawn.gen;
    newest_generation = std::max(newest_generation.load(), gen);
    if (gen >= newest_generation) newest_step = 0;
    for (const proto::SpawnWorker& entry : spawn.workers) {
      SimWorker worker;
      worker.gen = gen;
      worker.rank = entry.rank;
      worker.local_rank = entry.local_rank;
      worker.pid = next_pid++;
      emit(agent, proto::WorkerStartedReport{gen, worker.rank, worker.pid, worker.local_rank, wall});
      emit(agent, proto::FromWorker{gen, worker.rank, worker.pid, proto::WorkerMessage(proto::WorkerHello{worker.rank, gen, worker.pid})});
      if (job_done) {
        emit(agent, worker_exit(worker, wall));
      } else {
        agent.workers.push_back(worker);
      }
    }
  }
  void on(SimAgent& agent, const proto::KillRequest& kill, int64_t) {
    std::vector<int64_t> killed = kill_workers(agent, kill.gen, clock_().wall_ms());
    emit(agent, proto::Released{std::nullopt, kill.gen, std::move(killed), 0, 1, {}});
  }
  void on(SimAgent& agent, const proto::SampleRequest& sample, int64_t) {
    emit(agent, proto::SampleReply{sample.id.value_or(0), sample.gen, sample.rank, sample.pid,
                                   "simulated worker on " + agent.host + "\nState:\tT (stopped)\n", std::nullopt});
  }
  void on(SimAgent& agent, const proto::FenceRequest& fence_request, int64_t) {
    fence(agent, fence_request.reason.value_or("fence"), clock_().wall_ms());
  }
  // to_worker: simulated workers use no store; dump and gen_changed are not simulated.
  void on(SimAgent&, const proto::ToWorkerRequest&, int64_t) {}
  void on(SimAgent&, const proto::DumpRequest&, int64_t) {}
  void on(SimAgent&, const proto::GenChangedRequest&, int64_t) {}
  /// A simulated host has nothing to check: every health request is answered with no checks.
  void on(SimAgent& agent, const proto::HealthCheckRequest& request, int64_t) {
    emit(agent, proto::HealthReply{request.id, proto::HealthReport{request.moment, {}, 0}});
  }

  // A relay starts its hosts' agents (each session up after the modelled SSH setup, at most
  // relay_open's max_parallel at a time) and carries their streams.
  void on(SimAgent& agent, const proto::RelayOpenRequest& open, int64_t now) {
    agent.relay_max_parallel = open.ssh.max_parallel;
    for (const proto::RelayChild& wanted : open.children) {
      auto child = std::make_unique<SimAgent>();
      child->host = wanted.host;
      {
        std::lock_guard lock(mutex);  // start_agent numbers agents on the driver's thread
        child->index = next_index++;
      }
      child->relay = &agent;
      child->ready_ms = agent.lanes.next_ready(now, options.ssh_setup_ms, agent.relay_max_parallel);
      child->last_heard_ms = now;
      agent.children.push_back(std::move(child));
    }
  }
  void on(SimAgent& agent, const proto::RelayToRequest& to, int64_t now) {
    for (auto& child : agent.children) {
      if (child->host != to.host || child->closing) continue;
      return relay_to_child(*child, to.data, now);
    }
  }
  void on(SimAgent& agent, const proto::RelayFanoutRequest& fanout, int64_t now) {
    std::unordered_map<std::string_view, SimAgent*> children;
    for (auto& child : agent.children) {
      if (!child->closing) children.emplace(child->host, child.get());
    }
    for (const std::string& host : fanout.hosts) {
      if (auto child = children.find(host); child != children.end()) relay_to_child(*child->second, fanout.data, now);
    }
  }
  void relay_to_child(SimAgent& child, const std::string& bytes, int64_t now) {
    child.decoder.feed(bytes);
    child.last_heard_ms = now;
    if (now >= child.ready_ms) process_frames(child, now);
  }
  void on(SimAgent& agent, const proto::RelayCloseRequest& close, int64_t) {
    for (auto& child : agent.children) {
      if (child->host == close.host && !child->closing) fence(*child, "relay_close", clock_().wall_ms());
    }
  }
  /// A fresh agent whose first frame is attach becomes the detached agent it names: the same
  /// workers, answered with reattached (as attach_pipe.cpp and the agent do together).
  void on(SimAgent& agent, const proto::AgentAttachRequest& attach, int64_t now) {
    auto waiting = std::find_if(detached.begin(), detached.end(),
                                [&](const auto& candidate) { return attach_socket_of(candidate->host) == attach.socket; });
    if (waiting == detached.end()) {
      emit(agent, proto::AgentError{"re-attach: no agent waits at " + attach.socket + " (simulated)", "attach"});
      fence(agent, "attach", clock_().wall_ms());
      return;
    }
    SimAgent& old = **waiting;
    agent.configured = true;
    agent.batch_beats = old.batch_beats;
    agent.interval_ms = old.interval_ms;
    agent.timeout_ms = old.timeout_ms;
    agent.next_beat_ms = now + (agent.index * 7919) % agent.interval_ms;
    agent.hello_pid = old.hello_pid;
    agent.reattach_ms = old.reattach_ms;
    agent.workers = std::move(old.workers);
    proto::ReattachedReport report{old.host, old.hello_pid, now - old.detached_since_ms, old.detach_reason, {}, {}};
    for (const SimWorker& worker : agent.workers) report.workers.push_back({worker.gen, worker.rank, worker.pid});
    detached.erase(waiting);
    emit(agent, report);
  }

  static std::string attach_socket_of(const std::string& host) { return "/simulated/" + host + "/agent.attach"; }

  /// A relay is gone: its re-attachable hosts keep their workers and wait; the others are gone
  /// with it (their agents fence: nobody hears their workers' exits).
  void orphan_children(SimAgent& relay, const std::string& why, int64_t now) {
    for (auto& child : relay.children) {
      if (child->reattach_ms <= 0 || child->closing) continue;
      child->relay = nullptr;
      child->detached_since_ms = now;
      child->detach_reason = why;
      child->outgoing.clear();
      detached.push_back(std::move(child));
    }
    relay.children.clear();
  }

  void process_frames(SimAgent& agent, int64_t now) {
    for (;;) {
      Result<std::optional<json>> next = agent.decoder.next();
      if (!next) {
        if (agent.decoder.failed()) {
          agent.fd.reset();
          agent.closing = true;
          return;
        }
        continue;
      }
      if (!next->has_value()) return;
      on_frame(agent, **next, now);
      if (agent.closing || (!agent.relay && !agent.fd.valid())) return;
    }
  }

  void fence(SimAgent& agent, const std::string& reason, int64_t wall) {
    std::vector<int64_t> killed = kill_workers(agent, -1, wall);
    emit(agent, proto::AgentBye{reason, std::move(killed)});
    agent.closing = true;
  }

  /// The agent's beat, with each worker's beat as the real agent sends it: the first one at
  /// once as from_worker, later ones (with batch_beats) inside the agent's beat.
  void beat(SimAgent& agent, int64_t wall) {
    proto::AgentBeat beat;
    for (SimWorker& worker : agent.workers) {
      if (worker.hung) {  // a real agent lists only the workers that need attention
        beat.workers.push_back({worker.gen, worker.rank, worker.pid, true, "T"});
        continue;
      }
      if (!worker.saving) ++worker.step;
      if (worker.gen == newest_generation && worker.step > newest_step) newest_step = worker.step;
      proto::WorkerBeat message;
      message.step = worker.step;
      message.metrics.step_ms = static_cast<double>(options.step_ms);
      message.phase = worker.saving ? proto::WorkerPhase::checkpoint : proto::WorkerPhase::train;
      proto::FromWorker from{worker.gen, worker.rank, worker.pid, proto::WorkerMessage(message)};
      if (agent.batch_beats && worker.step > 1) {
        beat.worker_beats.push_back(std::move(from));
      } else {
        emit(agent, from);
      }
    }
    beat.agent_time_ms = wall;
    beat.load1 = 0.5;
    beat.mem_available_mb = 1'000'000;
    emit(agent, beat);
  }

  void read_from(SimAgent& agent, int64_t now) {
    char buffer[kReadChunk];
    for (;;) {
      ssize_t got = ::recv(agent.fd.get(), buffer, sizeof buffer, 0);
      if (got > 0) {
        agent.decoder.feed(std::string_view(buffer, static_cast<size_t>(got)));
        if (agent.last_heard_ms != 0) longest_silence_ms = std::max(longest_silence_ms.load(), now - agent.last_heard_ms);
        agent.last_heard_ms = now;
        continue;
      }
      if (got == 0) {  // the driver closed its end: a real agent fences on stdin EOF
        fence(agent, "stdin closed", clock_().wall_ms());
        return;
      }
      if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) agent.fd.reset();
      break;
    }
    if (now >= agent.ready_ms) process_frames(agent, now);
  }

  /// Every live agent: the directly connected ones and the hosts their relays carry.
  template <class Visit>
  void for_each_agent(Visit visit) {
    for (auto& agent : agents) {
      visit(*agent);
      for (auto& child : agent->children) visit(*child);
    }
  }

  SimWorker* find_rank(int rank, SimAgent** owner) {
    SimWorker* found = nullptr;
    for_each_agent([&](SimAgent& agent) {
      for (SimWorker& worker : agent.workers) {
        if (!found && worker.rank == rank && worker.gen == newest_generation) {
          *owner = &agent;
          found = &worker;
        }
      }
    });
    return found;
  }

  /// Beats, silences and sessions coming up: one agent's timers (next_timer: when to look again).
  void tick(SimAgent& agent, int64_t now, int64_t wall, int64_t& next_timer) {
    if (!agent.configured) {
      // Frames that came before its session was up wait for it.
      if (agent.ready_ms > now) next_timer = std::min(next_timer, agent.ready_ms);
      else if (agent.decoder.buffered_bytes() > 0 && !agent.closing) process_frames(agent, now);
      return;
    }
    if (agent.partitioned || agent.closing) return;
    if (agent.relay && agent.relay->partitioned) return;  // cut off with its relay: it hears nothing either
    if (now - agent.last_heard_ms >= agent.timeout_ms) {
      // As the real agent does (Agent::check_timers): a supervisor silent this long is gone.
      ++silence_fences;
      fence(agent, "supervisor silent for " + std::to_string(agent.timeout_ms) + "ms", wall);
      return;
    }
    next_timer = std::min(next_timer, agent.last_heard_ms + agent.timeout_ms);
    if (now >= agent.next_beat_ms) {
      beat(agent, wall);
      agent.next_beat_ms += agent.interval_ms;
      if (agent.next_beat_ms <= now) agent.next_beat_ms = now + agent.interval_ms;
    }
    next_timer = std::min(next_timer, agent.next_beat_ms);
  }

  void run() {
    ::pthread_setname_np(::pthread_self(), "fake-cluster");
    while (!stopping) {
      {
        std::vector<std::function<void()>> todo;
        {
          std::lock_guard lock(mutex);
          todo.swap(commands);
          for (auto& agent : new_agents) agents.push_back(std::move(agent));
          new_agents.clear();
        }
        for (auto& command : todo) command();
      }
      int64_t now = clock_().monotonic_ms();
      int64_t wall = clock_().wall_ms();
      for (auto& agent : agents) {
        if (!agent->fd.valid()) orphan_children(*agent, "its relay's session ended", now);
      }
      std::erase_if(agents, [](const std::unique_ptr<SimAgent>& agent) { return !agent->fd.valid(); });
      // A relayed agent whose relay is gone waits reattach_ms for an attach, then fences (its
      // workers go with it; nobody hears of them).
      std::erase_if(detached, [&](const std::unique_ptr<SimAgent>& agent) {
        if (now - agent->detached_since_ms < agent->reattach_ms) return false;
        ++silence_fences;
        return true;
      });

      int64_t next_timer = now + 100;
      for (auto& agent : agents) {
        tick(*agent, now, wall, next_timer);
        for (auto& child : agent->children) tick(*child, now, wall, next_timer);
      }
      for (auto& agent : detached) next_timer = std::min(next_timer, agent->detached_since_ms + agent->reattach_ms);
      std::vector<pollfd> fds;
      fds.reserve(agents.size() + 1);
      for (auto& agent : agents) {
        flush(*agent);
        short events = 0;
        if (agent->fd.valid() && !agent->partitioned) events = static_cast<short>(POLLIN | (agent->outgoing.empty() ? 0 : POLLOUT));
        fds.push_back({agent->fd.valid() ? agent->fd.get() : -1, events, 0});
      }
      fds.push_back({wake_read.get(), POLLIN, 0});
      int timeout = static_cast<int>(clock_().real_ms(std::max<int64_t>(0, next_timer - clock_().monotonic_ms())));
      int ready = ::poll(fds.data(), fds.size(), timeout);
      if (ready > 0 && (fds.back().revents & POLLIN)) {
        char drain[256];
        while (::read(wake_read.get(), drain, sizeof drain) > 0) {
        }
      }
      now = clock_().monotonic_ms();
      for (size_t i = 0; ready > 0 && i < agents.size(); ++i) {
        SimAgent& agent = *agents[i];
        if (!agent.fd.valid()) continue;
        if (agent.partitioned) {
          if (fds[i].revents & (POLLHUP | POLLERR)) agent.fd.reset();  // the driver gave up on it
          continue;
        }
        if (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) read_from(agent, now);
        if (agent.fd.valid()) flush(agent);
      }
      cpu_ns = thread_cpu_us() * 1000;
    }
  }
};

namespace {

class FakeTransportImpl final : public Transport {
 public:
  explicit FakeTransportImpl(FakeCluster::Simulation& simulation) : simulation_(simulation) {}

  Result<std::unique_ptr<AgentConnection>> start_agent(const AgentTarget& target) override {
    int pair[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, pair) != 0) {
      return Error::infra("simulated agent for " + target.host + ": socketpair: " + std::strerror(errno) +
                          " (raise the open-file limit: ulimit -n)");
    }
    auto agent = std::make_unique<SimAgent>();
    agent->host = target.host;
    agent->fd = UniqueFd(pair[1]);
    {
      std::lock_guard lock(simulation_.mutex);
      agent->ready_ms = simulation_.driver_lanes.next_ready(simulation_.clock_().monotonic_ms(), simulation_.options.ssh_setup_ms,
                                                            simulation_.options.max_parallel);
      agent->index = simulation_.next_index++;
      simulation_.new_agents.push_back(std::move(agent));
    }
    simulation_.wake();
    return std::unique_ptr<AgentConnection>(std::make_unique<FakeAgentConnection>(target.host, UniqueFd(pair[0])));
  }

 private:
  FakeCluster::Simulation& simulation_;
};

}  // namespace

FakeCluster::FakeCluster(FakeClusterOptions options) : simulation_(std::make_unique<Simulation>()) {
  simulation_->options = options;
  if (options.clock) simulation_->clock_ptr = options.clock;
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC | O_NONBLOCK) == 0) {
    simulation_->wake_read = UniqueFd(pipe_fds[0]);
    simulation_->wake_write = UniqueFd(pipe_fds[1]);
  }
  transport_ = std::make_unique<FakeTransportImpl>(*simulation_);
  simulation_->thread = std::thread([simulation = simulation_.get()] { simulation->run(); });
}

FakeCluster::~FakeCluster() {
  simulation_->stopping = true;
  simulation_->wake();
  if (simulation_->thread.joinable()) simulation_->thread.join();
}

Transport& FakeCluster::transport() { return *transport_; }

void FakeCluster::kill_host(const std::string& host) {
  simulation_->post([simulation = simulation_.get(), host] {
    for (auto& agent : simulation->agents) {
      if (agent->host == host) agent->fd.reset();  // agent and workers gone at once: EOF
      // A relayed host: its session ends, which its relay reports (relay_closed).
      for (auto& child : agent->children) {
        if (child->host != host) continue;
        child->workers.clear();
        child->outgoing.clear();
        child->closing = true;
      }
    }
  });
}

void FakeCluster::partition_host(const std::string& host) {
  simulation_->post([simulation = simulation_.get(), host] {
    simulation->for_each_agent([&](SimAgent& agent) {
      if (agent.host == host) agent.partitioned = true;
    });
  });
}

void FakeCluster::crash_rank(int rank, int code) {
  simulation_->post([simulation = simulation_.get(), rank, code] {
    SimAgent* agent = nullptr;
    SimWorker* worker = simulation->find_rank(rank, &agent);
    if (!worker) return;
    proto::WorkerExitReport exit = simulation->worker_exit(*worker, simulation->clock_().wall_ms());
    exit.code = code;
    exit.tail = {"simulated crash of rank " + std::to_string(rank)};
    simulation->emit(*agent, exit);
    std::erase_if(agent->workers, [&](const SimWorker& w) { return w.pid == exit.pid; });
  });
}

void FakeCluster::hang_rank(int rank) {
  simulation_->post([simulation = simulation_.get(), rank] {
    SimAgent* agent = nullptr;
    if (SimWorker* worker = simulation->find_rank(rank, &agent)) worker->hung = true;
  });
}

void FakeCluster::set_saving(int rank, bool saving) {
  simulation_->post([simulation = simulation_.get(), rank, saving] {
    SimAgent* agent = nullptr;
    if (SimWorker* worker = simulation->find_rank(rank, &agent)) worker->saving = saving;
  });
}

void FakeCluster::finish_all() {
  simulation_->post([simulation = simulation_.get()] {
    int64_t wall = simulation->clock_().wall_ms();
    simulation->job_done = true;
    simulation->for_each_agent([&](SimAgent& agent) {
      for (const SimWorker& worker : agent.workers) simulation->emit(agent, simulation->worker_exit(worker, wall));
      agent.workers.clear();
    });
  });
}

int64_t FakeCluster::newest_step() const { return simulation_->newest_step; }
int FakeCluster::newest_generation() const { return simulation_->newest_generation; }
double FakeCluster::simulation_cpu_seconds() const { return static_cast<double>(simulation_->cpu_ns) / 1e9; }
int FakeCluster::silence_fences() const { return simulation_->silence_fences; }
int64_t FakeCluster::longest_driver_silence_ms() const { return simulation_->longest_silence_ms; }
int64_t FakeCluster::frames_sent() const { return simulation_->sent; }
int64_t FakeCluster::frames_received() const { return simulation_->received; }
int64_t FakeCluster::relay_batches() const { return simulation_->relay_batches; }
int64_t FakeCluster::relay_batched_messages() const { return simulation_->relay_batched_messages; }

void FakeCluster::forge_relayed_pong(const std::string& relay, const std::string& host) {
  simulation_->post([simulation = simulation_.get(), relay, host] {
    for (auto& agent : simulation->agents) {
      if (agent->host != relay) continue;
      proto::RelayBatchReport forged{{proto::RelayedMessage{host, proto::Pong{}}}};
      agent->outgoing += proto::encode_frame(proto::to_json(proto::AgentMessage(forged)));
    }
  });
}

}  // namespace dtrain::sim
