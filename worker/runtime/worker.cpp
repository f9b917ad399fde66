#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "worker/contract/env.h"
#include "worker/contract/wire.h"
#include "worker/runtime/agent_connection.h"
#include "worker/runtime/communicators.h"

namespace dtrain::worker {
namespace {

using nlohmann::json;
namespace env = dtrain::contract::env;
namespace wire = dtrain::contract::wire;

int64_t monotonic_ms() {
  return std::chrono::duration_cast<Millis>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

/// Reads an integer variable; unset or empty gives `fallback`; garbage is an error quoting it.
Result<int64_t> env_int(const char* name, int64_t fallback, int64_t min_value) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return fallback;
  char* end = nullptr;
  errno = 0;
  long long value = std::strtoll(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0') {
    return Error{std::string(name) + "='" + text + "' is not an integer; the launcher sets it, so " +
                 "unset it or run under `dtrain submit`"};
  }
  if (value < min_value) {
    return Error{std::string(name) + "='" + text + "' must be at least " + std::to_string(min_value)};
  }
  return static_cast<int64_t>(value);
}

std::string env_text(const char* name) {
  const char* text = std::getenv(name);
  return text == nullptr ? "" : text;
}

/// DTRAIN_CKPT_FILE_MODE's value: unset or empty is 0600; else 3-4 octal digits with owner
/// read-write and no execute bit, no write for others (the launcher's spec check is the same).
std::optional<int> checkpoint_file_mode(const std::string& text) {
  if (text.empty()) return 0600;
  if (text.size() < 3 || text.size() > 4 || text.find_first_not_of("01234567") != std::string::npos) return std::nullopt;
  int mode = 0;
  for (char digit : text) mode = mode * 8 + (digit - '0');
  if ((mode & ~0666) != 0 || (mode & 0600) != 0600 || (mode & 0002) != 0) return std::nullopt;
  return mode;
}

/// Reads every contract variable into `topology` and `settings`.
Status read_contract(Topology& topology, Settings& settings) {
  Status status;
  auto read = [&](const char* name, int64_t fallback, int64_t min_value) -> int64_t {
    Result<int64_t> value = env_int(name, fallback, min_value);
    if (!value) {
      if (status.ok()) status = value.error();
      return fallback;
    }
    return *value;
  };
  topology.rank = static_cast<int>(read(env::kRank, 0, 0));
  topology.world_size = static_cast<int>(read(env::kWorldSize, 1, 1));
  topology.local_rank = static_cast<int>(read(env::kLocalRank, 0, 0));
  topology.local_world_size = static_cast<int>(read(env::kLocalWorldSize, 1, 1));
  topology.tp_size = static_cast<int>(read(env::kTpSize, 1, 1));
  topology.pp_size = static_cast<int>(read(env::kPpSize, 1, 1));
  // The launcher sets every coordinate; what is not set is derived as launcher/plan orders
  // ranks: TP fastest, then DP, then PP (rank = (pp * dp_size + dp) * tp_size + tp).
  int model = topology.tp_size * topology.pp_size;
  topology.dp_size = static_cast<int>(read(env::kDpSize, std::max(1, topology.world_size / model), 1));
  topology.tp_rank = static_cast<int>(read(env::kTpRank, topology.rank % topology.tp_size, 0));
  topology.dp_rank = static_cast<int>(read(env::kDpRank, (topology.rank / topology.tp_size) % topology.dp_size, 0));
  topology.pp_rank = static_cast<int>(read(env::kPpRank, topology.rank / (topology.tp_size * topology.dp_size), 0));
  if (status.ok() && topology.rank >= topology.world_size) {
    status = Error{"RANK=" + std::to_string(topology.rank) + " is not below WORLD_SIZE=" +
                   std::to_string(topology.world_size)};
  }
  if (status.ok() && topology.dp_size * model != topology.world_size) {
    status = Error{"DTRAIN_DP_SIZE*DTRAIN_TP_SIZE*DTRAIN_PP_SIZE = " + std::to_string(topology.dp_size) + "*" +
                   std::to_string(topology.tp_size) + "*" + std::to_string(topology.pp_size) +
                   " does not equal WORLD_SIZE=" + std::to_string(topology.world_size)};
  }

  settings.run_id = env_text(env::kRunId);
  settings.generation = static_cast<int>(read(env::kGeneration, 0, 0));
  settings.backend = env_text(env::kBackend);
  settings.master_addr = env_text(env::kMasterAddr);
  settings.master_port = static_cast<int>(read(env::kMasterPort, 0, 0));
  settings.global_batch = static_cast<int>(read(env::kGlobalBatch, 0, 0));
  settings.micro_batch = static_cast<int>(read(env::kMicroBatch, 0, 0));
  settings.grad_accum = static_cast<int>(read(env::kGradAccum, 0, 0));
  settings.ckpt_dir = env_text(env::kCkptDir);
  settings.ckpt_interval = static_cast<int>(read(env::kCkptInterval, 0, 0));
  settings.ckpt_keep = static_cast<int>(read(env::kCkptKeep, 3, 1));
  if (std::optional<int> mode = checkpoint_file_mode(env_text(env::kCkptFileMode))) {
    settings.ckpt_file_mode = *mode;
  } else if (status.ok()) {
    status = Error{std::string(env::kCkptFileMode) + "='" + env_text(env::kCkptFileMode) +
                   "' is not a checkpoint file mode; use octal such as 0600 or 0640 (owner read-write, no write "
                   "or execute for others)"};
  }
  settings.resume_step = read(env::kResumeStep, -1, -1);
  settings.heartbeat_interval_ms = static_cast<int>(read(env::kHeartbeatIntervalMs, 1000, 0));
  settings.fault_ckpt_delay_ms = static_cast<int>(read(env::kFaultCkptDelayMs, 0, 0));
  settings.in_place = env_text(env::kInPlace) == "1";
  settings.in_place_timeout_ms = static_cast<int>(read(env::kInPlaceTimeoutMs, 30'000, 1));
  settings.join_live = env_text(env::kJoinLive) == "1";
  if (status.ok() && !settings.backend.empty() && settings.backend != "gloo" && settings.backend != "nccl") {
    status = Error{"DTRAIN_BACKEND='" + settings.backend + "' is not a back end; use gloo or nccl"};
  }
  return status;
}

json beat_message(int64_t step, const Metrics& metrics) {
  json beat{{"type", wire::kBeat}, {"step", step}};
  contract::write_beat_metrics(metrics, beat);
  return beat;
}

// DTRAIN_STANDBY=1 (a warm standby): connect, say hello {standby}, wait as long as the agent
// keeps us for assign {gen, rank, env}, and take its environment as our own; the caller then
// reads the contract from it as any worker does, and says the usual hello on this connection.
Result<std::shared_ptr<AgentConnection>> become_assigned_standby() {
  std::string socket_path = env_text(env::kAgentSocket);
  if (socket_path.empty()) {
    return Error{"DTRAIN_STANDBY=1 but DTRAIN_AGENT_SOCKET is unset: a standby is started by a dtrain agent"};
  }
  Result<std::shared_ptr<AgentConnection>> connection = AgentConnection::connect(socket_path);
  if (!connection) return connection.error();
  if (Status said = (*connection)->send(json{{"type", wire::kHello}, {"standby", true},
                                             {"pid", static_cast<int64_t>(::getpid())}});
      !said) {
    return said.error();
  }
  Result<json> assign = (*connection)->wait_for_assignment();
  if (!assign) return assign.error();
  auto variables = assign->find("env");
  if (variables == assign->end() || !variables->is_object()) {
    return Error{"assign from the dtrain agent without an env object: " +
                 assign->dump(-1, ' ', false, json::error_handler_t::replace)};
  }
  // Names and values come from a peer: only what an environment can hold is taken (a name with
  // '=' or a NUL would be another variable, or cut short; setenv refuses an empty one).
  for (const auto& [name, value] : variables->items()) {
    if (!value.is_string() || name.empty() || name.find_first_of(std::string("=\0", 2)) != std::string::npos) continue;
    const std::string& text = value.get_ref<const std::string&>();
    if (text.find('\0') != std::string::npos) continue;
    ::setenv(name.c_str(), text.c_str(), 1);
  }
  ::unsetenv(env::kStandby);
  return *connection;
}

/// What a collective interrupted by an announcement says (CommInterrupts).
std::string announced_why(int generation) {
  return "generation " + std::to_string(generation) +
         " was announced (gen.changed: an in-place recovery began), so this generation's collectives end";
}

}  // namespace

struct Worker::Beats {
  std::mutex mutex;
  bool sent_any = false;
  int64_t last_sent_ms = 0;
  int64_t last_step = -1;
  std::optional<std::pair<int64_t, Metrics>> unsent;
};

/// Generations announced (gen.changed; in process: announce_generation) and what is reported
/// once per generation.
struct Worker::Generations {
  mutable std::mutex mutex;
  std::condition_variable announced_cv;
  std::optional<int> announced;                 // in process only; agents: the connection's
  std::shared_ptr<KvClient> announced_store;    // in process: the store of `announced`
  std::vector<std::shared_ptr<KvClient>> retired_stores;  // outlive whatever still refers to them
  int comm_ready_generation = -1;               // comm.ready was sent for this generation
};

struct Worker::Recorded {
  mutable std::mutex mutex;
  std::vector<std::string> lines;
};

Result<std::unique_ptr<Worker>> Worker::from_env(bool allow_standalone) {
  std::shared_ptr<AgentConnection> standby_connection;
  if (env_text(env::kStandby) == "1") {
    Result<std::shared_ptr<AgentConnection>> assigned = become_assigned_standby();
    if (!assigned) return assigned.error();
    standby_connection = std::move(*assigned);
  }
  Topology topology;
  Settings settings;
  if (Status read = read_contract(topology, settings); !read) return read.error();
  std::string socket_path = env_text(env::kAgentSocket);
  bool standalone_requested = allow_standalone || env_text("DTRAIN_STANDALONE") == "1";
  if (socket_path.empty()) {
    if (standalone_requested) {
      if (topology.world_size != 1) {
        return Error{"standalone mode runs a world of one, but WORLD_SIZE=" +
                     std::to_string(topology.world_size) + "; unset WORLD_SIZE or run under `dtrain submit`"};
      }
      return standalone(settings);
    }
    if (!env_text(env::kRank).empty()) {
      return Error{"RANK is set but DTRAIN_AGENT_SOCKET is not: this process was not started by a dtrain "
                   "agent (torchrun?). Run it with `dtrain submit job.yaml`, or pass --standalone "
                   "(DTRAIN_STANDALONE=1) to train alone"};
    }
    return Error{"not running under dtrain: DTRAIN_AGENT_SOCKET and RANK are unset. Run it with "
                 "`dtrain submit job.yaml`, or pass --standalone (DTRAIN_STANDALONE=1) to train alone"};
  }
  Result<std::shared_ptr<AgentConnection>> connection =
      standby_connection ? Result<std::shared_ptr<AgentConnection>>(standby_connection)
                         : AgentConnection::connect(socket_path);
  if (!connection) return connection.error();
  std::unique_ptr<Worker> worker(new Worker());
  worker->topology_ = topology;
  worker->settings_ = settings;
  worker->connection_ = *connection;
  worker->interrupts_ = std::make_shared<CommInterrupts>();
  (*connection)->on_generation_announced([interrupts = worker->interrupts_](int generation) {
    interrupts->interrupt_all(announced_why(generation));
  });
  auto agent_kv = std::make_shared<AgentKv>(*connection, settings.generation);
  worker->agent_kv_ = agent_kv.get();
  worker->kv_ = std::move(agent_kv);
  worker->generations_ = std::make_unique<Generations>();
  worker->beats_ = std::make_unique<Beats>();
  worker->recorded_ = std::make_unique<Recorded>();
  worker->send_line(json{{"type", wire::kHello},
                         {"rank", topology.rank},
                         {"gen", settings.generation},
                         {"pid", static_cast<int64_t>(::getpid())}}
                        .dump());
  return worker;
}

std::unique_ptr<Worker> Worker::standalone(Settings settings) {
  return in_process(Topology{}, std::move(settings), std::make_shared<InProcessKv>());
}

std::unique_ptr<Worker> Worker::in_process(Topology topology, Settings settings, std::shared_ptr<KvClient> kv) {
  std::unique_ptr<Worker> worker(new Worker());
  worker->topology_ = topology;
  worker->settings_ = std::move(settings);
  worker->kv_ = std::move(kv);
  worker->interrupts_ = std::make_shared<CommInterrupts>();
  worker->generations_ = std::make_unique<Generations>();
  worker->beats_ = std::make_unique<Beats>();
  worker->recorded_ = std::make_unique<Recorded>();
  worker->send_line(json{{"type", wire::kHello},
                         {"rank", topology.rank},
                         {"gen", worker->settings_.generation},
                         {"pid", static_cast<int64_t>(::getpid())}}
                        .dump());
  return worker;
}

Worker::~Worker() {
  if (!said_bye_) bye("exit");
}

void Worker::send_line(const std::string& line) {
  if (connection_) {
    // A lost agent is noticed by the next KV request or by the agent fencing us; a beat that
    // cannot be sent is not worth stopping training for.
    (void)connection_->send_line(line);
    return;
  }
  std::lock_guard lock(recorded_->mutex);
  recorded_->lines.push_back(line);
}

void Worker::beat(int64_t step, const Metrics& metrics, bool final_step) {
  int64_t now = monotonic_ms();
  {
    std::lock_guard lock(beats_->mutex);
    beats_->last_step = step;
    bool due = !beats_->sent_any || final_step ||
               now - beats_->last_sent_ms >= settings_.heartbeat_interval_ms;
    if (!due) {
      beats_->unsent = std::make_pair(step, metrics);
      return;
    }
    beats_->sent_any = true;
    beats_->last_sent_ms = now;
    beats_->unsent.reset();
  }
  send_line(beat_message(step, metrics).dump());
}

void Worker::set_checkpoint_phase(bool saving) {
  json message;
  {
    std::lock_guard lock(beats_->mutex);
    if (beats_->last_step < 0) return;
    // The newest unsent beat goes out with the phase, so that its metrics are not lost.
    message = beats_->unsent ? beat_message(beats_->unsent->first, beats_->unsent->second)
                             : beat_message(beats_->last_step, Metrics{});
    beats_->unsent.reset();
    beats_->sent_any = true;
    beats_->last_sent_ms = monotonic_ms();
  }
  message["phase"] = saving ? wire::kPhaseCheckpoint : wire::kPhaseTrain;
  send_line(message.dump());
}

void Worker::report_checkpoint_committed(int64_t step, int64_t bytes, int64_t ms) {
  send_line(json{{"type", wire::kCkptCommitted}, {"step", step}, {"bytes", bytes}, {"ms", ms}}.dump());
}

void Worker::report_checkpoint_rejected(int64_t step, const std::string& reason) {
  send_line(json{{"type", wire::kCkptRejected}, {"step", step}, {"reason", reason}}.dump());
}

bool Worker::checkpoint_requested(int64_t step) {
  if (!connection_) return false;  // standalone: nobody can ask
  std::optional<std::string> reason = connection_->take_checkpoint_request(step);
  if (!reason) return false;
  std::fprintf(stderr, "dtrain: checkpoint requested at step %lld: %s\n", static_cast<long long>(step),
               reason->c_str());
  return true;
}

void Worker::checkpoint_request_served(int64_t step) {
  if (connection_) connection_->checkpoint_request_served(step);
}

void Worker::bye(const std::string& reason) {
  if (said_bye_) return;
  said_bye_ = true;
  std::optional<std::pair<int64_t, Metrics>> unsent;
  {
    std::lock_guard lock(beats_->mutex);
    unsent = std::move(beats_->unsent);
    beats_->unsent.reset();
  }
  if (unsent) send_line(beat_message(unsent->first, unsent->second).dump());
  send_line(json{{"type", wire::kBye}, {"reason", reason}}.dump());
}

std::vector<std::string> Worker::sent_lines() const {
  std::lock_guard lock(recorded_->mutex);
  return recorded_->lines;
}

Result<std::unique_ptr<Communicator>> Worker::connect_group(const CommGroup& group, Millis timeout) {
  if (group.size() == 1) return make_solo_communicator();
  std::string backend = settings_.backend;
  if (backend.empty()) backend = nccl_usable() ? "nccl" : "gloo";
  if (backend == "nccl") return make_nccl_communicator(*kv_, group, topology_, timeout, interrupts_);
  return make_gloo_communicator(*kv_, group, settings_, timeout, interrupts_);
}

Result<std::unique_ptr<Communicator>> Worker::connect(Millis timeout) {
  int64_t started = monotonic_ms();
  Result<std::unique_ptr<Communicator>> communicator = connect_group(world_group(topology_), timeout);
  // Every back end returns only once init is complete (Gloo: full mesh connected; NCCL: the
  // non-blocking init polled to ncclSuccess), so "ready" here means a collective could run. A
  // world of one says it too: the supervisor waits for every rank's comm.ready.
  if (communicator) report_comm_ready(monotonic_ms() - started);
  return communicator;
}

void Worker::report_comm_ready(int64_t init_ms) {
  {
    std::lock_guard lock(generations_->mutex);
    if (generations_->comm_ready_generation == settings_.generation) return;
    generations_->comm_ready_generation = settings_.generation;
  }
  send_line(json{{"type", wire::kCommReady}, {"ms", init_ms}}.dump());
}

std::optional<int> Worker::generation_change() const {
  std::optional<int> announced;
  if (connection_) {
    announced = connection_->announced_generation();
  } else {
    std::lock_guard lock(generations_->mutex);
    announced = generations_->announced;
  }
  if (announced && *announced > settings_.generation) return announced;
  return std::nullopt;
}

void Worker::announce_generation(int generation, std::shared_ptr<KvClient> store) {
  if (connection_) return;
  std::lock_guard lock(generations_->mutex);
  if (generations_->announced && *generations_->announced >= generation) return;
  generations_->announced = generation;
  generations_->announced_store = std::move(store);
  generations_->announced_cv.notify_all();
  interrupts_->interrupt_all(announced_why(generation));
}

Result<int> Worker::adopt_new_generation(Millis timeout) {
  int adopted;
  if (connection_) {
    Result<int> announced = connection_->wait_for_generation_after(settings_.generation, timeout);
    if (!announced) return announced.error();
    adopted = *announced;
    agent_kv_->set_generation(adopted);  // the same connection serves the new generation's store
  } else {
    std::unique_lock lock(generations_->mutex);
    auto newer = [&] { return generations_->announced && *generations_->announced > settings_.generation; };
    if (!generations_->announced_cv.wait_for(lock, timeout, newer)) {
      return Error{"no new generation (after " + std::to_string(settings_.generation) + ") announced within " +
                   std::to_string(timeout.count()) + "ms"};
    }
    adopted = *generations_->announced;
    if (generations_->announced_store) {
      // Communicators of the old generation may still hold a reference to its store.
      generations_->retired_stores.push_back(kv_);
      kv_ = generations_->announced_store;
    }
  }
  settings_.generation = adopted;
  std::lock_guard lock(beats_->mutex);
  beats_->sent_any = false;
  beats_->last_step = -1;
  beats_->unsent.reset();
  return adopted;
}

}  // namespace dtrain::worker

namespace dtrain::worker {
namespace {

std::string coordinate_key(int tp, int pp, int dp) {
  return "layout/tp" + std::to_string(tp) + "-pp" + std::to_string(pp) + "-dp" + std::to_string(dp);
}

}  // namespace

Result<ParallelGroups> Worker::connect_groups(Millis timeout) {
  int64_t started = monotonic_ms();
  const Topology& me = topology_;
  // Who sits where: every rank publishes its coordinates, then reads those of its groups.
  if (me.world_size > 1) {
    if (Status set = kv_->set(coordinate_key(me.tp_rank, me.pp_rank, me.dp_rank), std::to_string(me.rank)); !set) {
      return Error{"publishing this rank's parallel coordinates: " + set.error().message};
    }
  }
  // `axis` ("tp") and `id` ("pp0-dp1": the coordinates its members share) name the group in
  // the store.
  auto group_of = [&](const char* name, const char* axis, const std::string& id, int size, int index,
                      auto coordinates_of) -> Result<CommGroup> {
    CommGroup group{name, std::string(axis) + "/" + id + "/", {}, index};
    if (size == 1) {
      group.ranks = {me.rank};
      return group;
    }
    std::vector<std::string> keys;
    for (int i = 0; i < size; ++i) {
      auto [tp, pp, dp] = coordinates_of(i);
      keys.push_back(coordinate_key(tp, pp, dp));
    }
    Result<std::vector<std::string>> ranks = kv_->wait(keys, timeout);
    if (!ranks) return Error{"the ranks of this rank's " + std::string(name) + ": " + ranks.error().message};
    for (const std::string& rank : *ranks) group.ranks.push_back(std::atoi(rank.c_str()));
    return group;
  };
  std::string tp_id = "pp" + std::to_string(me.pp_rank) + "-dp" + std::to_string(me.dp_rank);
  std::string pp_id = "tp" + std::to_string(me.tp_rank) + "-dp" + std::to_string(me.dp_rank);
  std::string dp_id = "tp" + std::to_string(me.tp_rank) + "-pp" + std::to_string(me.pp_rank);
  Result<CommGroup> tensor = group_of("tensor-parallel group", "tp", tp_id, me.tp_size, me.tp_rank,
                                      [&](int i) { return std::tuple{i, me.pp_rank, me.dp_rank}; });
  if (!tensor) return tensor.error();
  Result<CommGroup> pipeline = group_of("pipeline-parallel group", "pp", pp_id, me.pp_size, me.pp_rank,
                                        [&](int i) { return std::tuple{me.tp_rank, i, me.dp_rank}; });
  if (!pipeline) return pipeline.error();
  Result<CommGroup> data = group_of("data-parallel group", "dp", dp_id, me.dp_size, me.dp_rank,
                                    [&](int i) { return std::tuple{me.tp_rank, me.pp_rank, i}; });
  if (!data) return data.error();
  // In a job without model parallelism the data-parallel group is the world: its messages
  // then read like a world communicator's ("rank 1 of 4").
  if (me.tp_size * me.pp_size == 1) data->name.clear();

  ParallelGroups groups;
  // The same order on every rank: a rank in two groups must not wait in one for a peer that
  // waits for it in the other.
  for (auto [group, out, ranks] : {std::tuple{&*tensor, &groups.tensor, &groups.tensor_ranks},
                                   std::tuple{&*pipeline, &groups.pipeline, &groups.pipeline_ranks},
                                   std::tuple{&*data, &groups.data, &groups.data_ranks}}) {
    Result<std::unique_ptr<Communicator>> connected = connect_group(*group, timeout);
    if (!connected) return connected.error();
    *out = std::move(*connected);
    *ranks = group->ranks;
  }
  report_comm_ready(monotonic_ms() - started);
  return groups;
}

}  // namespace dtrain::worker
