// GenerationLauncher (generation_launcher.h): supervisor Actions → frames to agents — starting a
// generation (port, then spawn), continuing one in place, stopping one, sampling a hung worker.

#include "launcher/run/generation_launcher.h"

#include <netdb.h>
#include <netinet/in.h>
#include <arpa/inet.h>

#include <algorithm>
#include <cstdlib>
#include <utility>

#include "launcher/proto/messages.h"
#include "launcher/events/events.h"
#include "worker/contract/env.h"

namespace dtrain::run {

namespace {

using nlohmann::json;

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

}  // namespace

GenerationLauncher::GenerationLauncher(Output& out, const spec::JobSpec& spec, const RunDirectory& run,
                                       const supervisor::Supervisor& supervisor, store::KvStore& store,
                                       RankProgressTable& progress, const AgentLinks& links, const Clock& clock,
                                       std::string launch_hostname)
    : out_(out),
      spec_(spec),
      run_(run),
      supervisor_(supervisor),
      store_(store),
      progress_(progress),
      links_(links),
      clock_(clock),
      launch_hostname_(std::move(launch_hostname)) {}

void GenerationLauncher::kill_ranks(const supervisor::KillRanks& kill) {
  auto link = links_.find(kill.host);
  if (link == links_.end() || link->second->lost) return;  // its loss is a failure of its own
  // KILL at once: the rank is hung (or misbehaving), and its peers wait for it.
  link->second->send(proto::KillRequest{kill.gen, proto::KillSignal::kill, 0, kill.ranks});
}

void GenerationLauncher::continue_in_place(const supervisor::ContinueInPlace& action) {
  out_.send_store_replies(store_.begin_generation(action.gen, clock_.monotonic_ms()));
  for (int rank : action.replaced) progress_.reset_rank(rank);
  out_.write_file(run_.plan_path(action.gen), plan::to_json(action.plan).dump(2));
  out_.log().info("generation {} continues generation {} in place; replaced rank(s): {}", action.gen,
                  action.from_gen, nlohmann::json(action.replaced).dump());
  // The survivors first: each agent carries its live workers over and tells them (gen.changed)
  // before the replacement's spawn, which its agent would refuse for a rank still held.
  for (const std::string& host : action.hosts) {
    auto link = links_.find(host);
    if (link == links_.end() || link->second->lost) continue;
    link->second->send(proto::GenChangedRequest{next_request_id_++, action.from_gen, action.gen});
  }
  // The generation keeps its rendezvous address; only the counters change.
  GenerationContext context = spawned_context_.value_or(GenerationContext{});
  context.generation = action.gen;
  context.restart_count = action.restart_count;
  context.resume_step = -1;
  spawned_context_ = context;
  EnvMap join_live{{contract::env::kJoinLive, "1"}};
  EnvMap common = common_worker_env(spec_, action.plan, context);
  for (const plan::PlanHost& host : action.plan.hosts) {
    std::vector<int> replaced;
    for (int rank : host.ranks) {
      if (std::find(action.replaced.begin(), action.replaced.end(), rank) != action.replaced.end()) {
        replaced.push_back(rank);
      }
    }
    auto link = links_.find(host.entry.name);
    if (replaced.empty() || link == links_.end() || link->second->lost) continue;
    link->second->send(spawn_frame(action.gen, action.plan, context, common, host, replaced, join_live));
  }
  out_.record(events::GenerationSpawned{action.gen, context.master_addr, context.master_port, context.backend, -1,
                                        context.checkpoint_dir}
                  .to_json());
  out_.feed(supervisor::GenerationSpawned{action.gen});
}

void GenerationLauncher::stop_generation(const supervisor::StopGeneration& stop) {
  pending_start_.reset();
  for (const std::string& host : stop.hosts) {
    auto link = links_.find(host);
    if (link == links_.end() || link->second->lost) {
      out_.feed(supervisor::GenerationReleased{stop.gen, host});
      continue;
    }
    link->second->send(proto::KillRequest{stop.gen, proto::KillSignal::term, stop.grace_ms, std::nullopt});
  }
}

void GenerationLauncher::capture_sample(const supervisor::CaptureSample& sample) {
  // Bounded so that neither we nor the agent look silent (the agent also caps it at its
  // heartbeat timeout / 2).
  Millis gdb_timeout(std::clamp<int64_t>(spec_.heartbeat.timeout.count() / 2, 500, 5000));
  auto link = links_.find(sample.host);
  if (link == links_.end() || link->second->lost) {
    out_.record(events::WorkerSample{sample.rank, sample.host, sample.pid,
                                     "host " + sample.host + " is not connected; no sample"}
                    .to_json());
    return;
  }
  // PyTorch flight-recorder dumps first, from every rank of the generation on every host (a
  // collective hangs on all its ranks, and fr_trace compares them): each agent writes to its
  // workers' debug-info pipes and waits a bounded time for the dumps (dump frames, hang.dump).
  // Before the sample: gdb stops the process it attaches to, and that one must still dump.
  for (const plan::PlanHost& host : supervisor_.current_plan().hosts) {
    auto peer = links_.find(host.entry.name);
    if (peer == links_.end() || peer->second->lost) continue;
    peer->second->send(proto::DumpRequest{next_request_id_++, sample.gen, gdb_timeout.count()});
  }
  // Every host's agent samples its own worker, the launch node's too: the supervisor's loop never
  // blocks on gdb. Sent before the kill; the agent handles frames in order, so it samples the
  // hung process before it stops it. Its answer is a sample frame (handle_frame).
  link->second->send(
      proto::SampleRequest{next_request_id_++, sample.gen, sample.rank, sample.pid, gdb_timeout.count()});
}

void GenerationLauncher::start_generation(const supervisor::StartGeneration& start) {
  out_.send_store_replies(store_.begin_generation(start.gen, clock_.monotonic_ms()));
  progress_.reset(start.plan.ranks.size());
  out_.write_file(run_.plan_path(start.gen), plan::to_json(start.plan).dump(2));
  out_.log().info("generation {} plan:\n{}", start.gen, plan::to_text(start.plan));
  pending_start_ = start;
  const std::string& rank0_host = start.plan.ranks.at(0).host;
  auto link = links_.find(rank0_host);
  if (link == links_.end() || link->second->lost) {
    out_.feed(
        supervisor::HostLost{rank0_host, "not connected when generation " + std::to_string(start.gen) + " started"});
    return;
  }
  pending_port_id_ = next_request_id_++;
  link->second->send(proto::ReservePortRequest{pending_port_id_});
}

void GenerationLauncher::port_reserved(int64_t request_id, int port) {
  if (request_id == pending_port_id_ && pending_start_) spawn_generation(port);
}

void GenerationLauncher::port_reservation_failed(const std::string& host, const std::string& error) {
  // A launch step the agent could not do ends the generation now rather than at its deadline.
  if (!pending_start_ || pending_start_->plan.ranks.at(0).host != host) return;
  int gen = pending_start_->gen;
  pending_start_.reset();
  out_.feed(supervisor::LaunchStepFailed{gen, host, "port reservation", error});
}

void GenerationLauncher::spawn_generation(int port) {
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
  spawned_context_ = context;
  EnvMap common = common_worker_env(spec_, plan, context);  // once: a map of ~30 per host adds up at 2,048
  for (const plan::PlanHost& host : plan.hosts) {
    auto link = links_.find(host.entry.name);
    if (link == links_.end() || link->second->lost) continue;
    link->second->send(spawn_frame(start.gen, plan, context, common, host, {}, {}));
  }
  out_.record(events::GenerationSpawned{start.gen, context.master_addr, port, context.backend, start.resume_step,
                                        context.checkpoint_dir}
                  .to_json());
  out_.feed(supervisor::GenerationSpawned{start.gen});
}

proto::SpawnRequest GenerationLauncher::spawn_frame(int gen, const plan::RankPlan& plan,
                                                    const GenerationContext& context, const EnvMap& common,
                                                    const plan::PlanHost& host, const std::vector<int>& ranks,
                                                    const EnvMap& extra) {
  auto link = links_.find(host.entry.name);
  bool host_has_gpus = link != links_.end() && link->second->facts.contains("gpus") &&
                       link->second->facts["gpus"].is_array() && !link->second->facts["gpus"].empty();
  proto::SpawnRequest spawn;
  spawn.gen = gen;
  spawn.argv = spec_.worker.command;
  spawn.workdir = spec_.worker.workdir;
  spawn.env = common;
  spawn.log_tail_lines = 20;
  spawn.instrument = spec_.worker.instrument;
  spawn.standby = spec_.elastic.standby_per_host;
  if (spec_.worker.pool_per_host > 0) {
    spawn.standby = spec_.worker.pool_per_host;
    spawn.standby_bootstrap = spec_.worker.pool_imports;
  }
  for (int rank : ranks.empty() ? host.ranks : ranks) {
    const plan::RankSlot& slot = plan.ranks.at(static_cast<size_t>(rank));
    EnvMap env = rank_worker_env(plan, slot);
    env.merge(device_worker_env(spec_, plan, slot, context.backend == "nccl" || host_has_gpus));
    for (const auto& [name, value] : extra) env[name] = value;
    spawn.workers.push_back({rank, slot.local_rank, std::move(env)});
  }
  return spawn;
}

MasterAddressFacts GenerationLauncher::master_address_facts(const plan::RankPlan& plan) {
  bool remote_hosts = std::any_of(plan.hosts.begin(), plan.hosts.end(),
                                  [](const plan::PlanHost& host) { return !host.entry.is_local(); });
  bool rank0_local = plan.hosts.at(static_cast<size_t>(plan.ranks.at(0).host_index)).entry.is_local();
  if (!remote_hosts || !rank0_local) return {};  // master_address() needs no facts then
  if (!launch_node_facts_) {
    // Once per run: a name lookup (usually /etc/hosts) is too slow to repeat on the loop.
    MasterAddressFacts facts;
    facts.launch_hostname = launch_hostname_;
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
  out_.log().info("MASTER_ADDR facts: hostname {} ({}), ssh source address {}", facts.launch_hostname,
                  facts.launch_hostname_routable ? "resolves beyond loopback" : "does not resolve beyond loopback",
                  facts.ssh_source_address.empty() ? "unknown" : facts.ssh_source_address);
  return facts;
}

}  // namespace dtrain::run
