// FrameRouter (frame_router.h): one handler per agent message type, one per worker message type
// the agents forward, and the host resources their beats carry.

#include "launcher/run/frame_router.h"

#include <algorithm>
#include <cmath>

#include "launcher/base/base64.h"
#include "launcher/events/events.h"
#include "launcher/base/strings.h"
#include "launcher/base/version.h"
#include "launcher/proto/messages.h"
#include "launcher/run/health_request.h"
#include "worker/contract/wire.h"

namespace dtrain::run {

namespace msg = proto::msg;
using nlohmann::json;

namespace {

json spread(std::vector<double> values) {
  if (values.empty()) return nullptr;
  std::sort(values.begin(), values.end());
  return {{"min", values.front()}, {"median", values[values.size() / 2]}, {"max", values.back()}};
}

}  // namespace

FrameRouter::FrameRouter(Output& output, const supervisor::Supervisor& supervisor, store::KvStore& store,
                         RankProgressTable& progress, const RunDirectory& run, const Clock& clock)
    : out_(output), supervisor_(supervisor), store_(store), progress_(progress), run_(run), clock_(clock) {}

const std::vector<std::string>* FrameRouter::exit_tail(int rank) const {
  auto tail = exit_tails_.find(rank);
  return tail == exit_tails_.end() ? nullptr : &tail->second;
}

void FrameRouter::route(AgentLink& link, std::string_view body) {
  Result<proto::AgentMessage> message = frame_parser_.parse(body);
  if (!message) {
    agent_protocol_error(link, message.error().message);
    return;
  }
  std::visit([&](const auto& typed) { on(link, typed); }, *message);
}

void FrameRouter::route_relayed(AgentLink& link, const proto::RelayedMessage& relayed) {
  std::visit([&](const auto& typed) { on(link, typed); }, relayed.message);
}

void FrameRouter::agent_protocol_error(AgentLink& link, const std::string& problem) {
  int count = ++protocol_errors_["agent " + link.host()];
  if (count > kMaxProtocolErrorsPerSender) return;  // the host is lost already
  out_.record(events::ProtocolError{"agent", link.host(), problem, count}.to_json());
  if (count == 1) {
    out_.console_line("warning: the agent on " + link.host() + " sent a message that could not be parsed: " + problem);
  }
  if (count >= kMaxProtocolErrorsPerSender) {
    out_.host_lost(
        link, "the agent sent " + std::to_string(count) + " messages that could not be parsed; the last: " + problem);
  }
}

void FrameRouter::worker_protocol_error(AgentLink& link, std::optional<int> gen, std::optional<int> rank, int64_t pid,
                                        const std::string& problem) {
  // Counted per worker process of a generation: a restarted rank starts again from zero.
  std::string sender = "worker " + link.host() + " pid " + std::to_string(pid);
  if (gen && rank) sender += " gen " + std::to_string(*gen) + " rank " + std::to_string(*rank);
  int count = ++protocol_errors_[sender];
  if (count > kMaxProtocolErrorsPerSender) return;  // already failed for it; the log has enough
  out_.record(events::ProtocolError{"worker", link.host(), problem, count, pid, gen, rank}.to_json());
  if (count == 1) {
    out_.console_line("warning: " + (rank ? "rank " + std::to_string(*rank) + " " : std::string()) + "on " +
                      link.host() + " (pid " + std::to_string(pid) + ") sent a message that could not be parsed: " +
                      problem + " (dropped; every further one is a protocol.error event)");
  }
  if (count == kMaxProtocolErrorsPerSender && gen && rank) {
    out_.feed(supervisor::WorkerMisbehaved{
        *gen, *rank, "sent " + std::to_string(count) + " messages that could not be parsed; the last: " + problem});
  }
}

void FrameRouter::on(AgentLink& link, const proto::AgentHello& hello) {
  if (hello.protocol != proto::kProtocolVersion) {
    out_.host_lost(link, "agent speaks protocol " + std::to_string(hello.protocol) + ", this dtrain speaks " +
                             std::to_string(proto::kProtocolVersion) + "; install dtrain " + kVersion + " there");
    return;
  }
  link.connected = true;
  link.agent_pid = hello.pid;
  link.attach_socket = hello.attach_socket.value_or("");
  out_.agent_connected(link);
  link.facts = hello.facts;
  // A local agent shares our clock: a one-round-trip estimate would only add noise.
  if (!link.connection().local_pid()) {
    link.measure_offset(hello.agent_time_ms.value_or(clock_.wall_ms()), clock_.wall_ms());
  }
  // A ping now measures the clock offset from a true round trip (refine_offset) before any
  // failure has to be ordered across hosts.
  out_.ping(link);
  json host_file{{"host", link.host()}, {"agent_pid", hello.pid}, {"version", hello.version},
                 {"clock_offset_ms", link.offset_ms()}, {"facts", link.facts}};
  if (hello.stack) host_file["stack"] = proto::to_json(*hello.stack);
  out_.write_unsynced_file(run_.host_facts_path(link.host()),
                           host_file.dump(2, ' ', false, json::error_handler_t::replace));  // re-made at every connect
  out_.record(events::HostConnected{link.host(), hello.pid, hello.version, link.offset_ms(), link.relayed_by}.to_json());
  out_.record(events::HostFacts{link.host(), link.facts}.to_json());
  // A stack that did not parse is the agent's protocol error; the host connects, its stack unknown.
  if (hello.stack_error) agent_protocol_error(link, *hello.stack_error + " (its software stack is unknown)");
  std::optional<events::HostStack> stack;
  if (hello.stack) {
    stack = events::HostStack{link.host(), {}, hello.stack->ms, hello.stack->notes};
    for (auto& [item, value] : proto::stack_items(*hello.stack)) stack->items.push_back({item, value});
    out_.record(stack->to_json());
  }
  out_.feed(supervisor::HostConnected{link.host(), std::move(stack), link.health_requested});
}

void FrameRouter::on(AgentLink& link, const proto::ReattachedReport& report) {
  if (!link.reattaching) return agent_protocol_error(link, "reattached on a channel that was not a re-attach");
  if (report.pid != link.agent_pid) {
    return out_.host_lost(link, "the re-attach reached agent pid " + std::to_string(report.pid) + ", not the agent pid " +
                                    std::to_string(link.agent_pid) + " that ran its workers");
  }
  out_.agent_reattached(link, report);
  // Its exits that went into the lost channel: those the supervisor still counts as live. The
  // rest it heard already (or they belong to a generation it left).
  // An agent speaks only for its own host's ranks.
  const std::vector<supervisor::RankStatus>& ranks = supervisor_.ranks();
  const plan::RankPlan& plan = supervisor_.current_plan();
  for (const proto::WorkerExitReport& exit : report.exits) {
    if (exit.gen != supervisor_.generation() || exit.rank < 0 || exit.rank >= static_cast<int>(ranks.size()) ||
        exit.rank >= static_cast<int>(plan.ranks.size()) || plan.ranks[static_cast<size_t>(exit.rank)].host != link.host()) {
      continue;
    }
    const supervisor::RankStatus& rank = ranks[static_cast<size_t>(exit.rank)];
    bool live = rank.state == supervisor::RankState::starting || rank.state == supervisor::RankState::running;
    if (live && (rank.pid == 0 || rank.pid == exit.pid)) on(link, exit);
  }
}

void FrameRouter::on(AgentLink&, const proto::WorkerStartedReport& started) {
  out_.feed(supervisor::WorkerStarted{started.gen, started.rank, static_cast<int>(started.pid)});
}

void FrameRouter::on(AgentLink& link, const proto::WorkerSpawnFailedReport& failed) {
  out_.record(events::WorkerSpawnFailed{failed.rank, link.host(), failed.error}.to_json());
  out_.feed(supervisor::WorkerSpawnFailed{failed.gen, failed.rank, failed.error});
}

void FrameRouter::on(AgentLink& link, const proto::WorkerExitReport& exit) {
  events::WorkerExit event{exit.gen, exit.rank, link.host(), exit.pid};
  const plan::RankPlan& plan = supervisor_.current_plan();
  if (exit.rank < static_cast<int>(plan.ranks.size())) {
    event.local_rank = plan.ranks[static_cast<size_t>(exit.rank)].local_rank;
  }
  std::optional<int> code;
  std::optional<std::string> signal_name;
  if (exit.signal) {
    signal_name = exit.signal_name.value_or("signal " + std::to_string(*exit.signal));
  } else {
    code = exit.code.value_or(-1);
  }
  event.code = code;
  event.signal = signal_name;
  event.log = run_.rank_log_path(exit.rank);
  event.tail = exit.tail;
  exit_tails_[exit.rank] = exit.tail;
  supervisor::WorkerExited exited;
  exited.gen = exit.gen;
  exited.rank = exit.rank;
  exited.pid = static_cast<int>(exit.pid);
  exited.code = code;
  exited.signal = signal_name;
  exited.observed_uncertainty_ms = link.offset_uncertainty_ms();
  exited.killed_by_agent = exit.killed_by_agent;
  exited.last_output = exit.tail;
  if (exit.error) {  // the rank's TORCHELASTIC_ERROR_FILE: the exception, not just the exit code
    event.error =
        events::WorkerError{exit.error->message, exit.error->type, exit.error->traceback, exit.error->timestamp};
    exited.error_type = exit.error->type;
    exited.error_message = exit.error->message;
    exited.traceback = exit.error->traceback;
  }
  out_.record(event.to_json());
  store_.forget({link.host(), exit.rank});  // its pending waits would be answered to nobody
  exited.observed_ms = link.to_supervisor_time(exit.agent_time_ms.value_or(clock_.wall_ms()));
  out_.feed(exited);
}

void FrameRouter::on(AgentLink& link, const proto::WorkerLogLine& log) {
  out_.rank_output(log.rank, log.gen, log.stream, log.line);
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
  out_.record(events::CommWarn{log.gen, log.rank, link.host(), log.line}.to_json());
}

void FrameRouter::flush_comm_warn(int rank, CommWarnWindow& window) {
  if (window.repeated > 0) {
    out_.record(events::CommWarn{window.gen, rank, window.host, window.last_line, window.repeated,
                                 static_cast<double>(kCommWarnWindowMs) / 1000.0,
                                 std::to_string(window.repeated) + " more NCCL WARN lines from this rank within " +
                                     format_duration(Millis(kCommWarnWindowMs)) +
                                     "; the last is shown (all are in its log)"}
                    .to_json());
  }
  window.started_ms = 0;
  window.repeated = 0;
}

void FrameRouter::flush_comm_warns(bool all) {
  int64_t now = clock_.monotonic_ms();
  for (auto& [rank, window] : comm_warns_) {
    if (window.started_ms != 0 && (all || now - window.started_ms >= kCommWarnWindowMs)) flush_comm_warn(rank, window);
  }
}

void FrameRouter::on(AgentLink& link, const proto::SampleReply& sample) {
  if (sample.text) {
    // samples/gen<g>-rank<r>.txt, then the event naming it (or the write's error).
    out_.write_file_then_record(
        run_.path() + "/samples/gen" + std::to_string(sample.gen) + "-rank" + std::to_string(sample.rank) + ".txt",
        *sample.text, events::WorkerSample{sample.rank, link.host(), sample.pid}.to_json());
  } else {
    out_.record(events::WorkerSample{sample.rank, link.host(), sample.pid,
                                     sample.error.value_or("the agent sent a sample without text")}
                    .to_json());
  }
}

void FrameRouter::on(AgentLink& link, const proto::FlightRecorderDump& dump) {
  // Next to the stack sample of the same rank: samples/gen<g>-rank<r>.flight-recorder (a pickle;
  // PyTorch's fr_trace reads a directory of them).
  events::HangDump event{dump.gen, dump.rank, link.host(), dump.pid, dump.bytes};
  std::string data;
  if (dump.data_base64 && !base64_decode(*dump.data_base64, data)) {
    event.error = "the agent's dump is not valid base64";
    return out_.record(event.to_json());
  }
  if (dump.data_base64) {
    out_.write_file_then_record(run_.path() + "/samples/gen" + std::to_string(dump.gen) + "-rank" +
                                    std::to_string(dump.rank) + ".flight-recorder",
                                std::move(data), event.to_json());
    return;
  }
  if (dump.kept_path) {
    event.kept_path = *dump.kept_path;
    event.detail = "larger than " + std::to_string(proto::kMaxDumpBytes >> 20) + " MiB: kept on " + link.host() +
                   " at " + *dump.kept_path;
  } else {
    event.error = dump.error.value_or("the agent sent a dump without data");
  }
  out_.record(event.to_json());
}

void FrameRouter::on(AgentLink&, const proto::PortReply& port) { out_.port_reserved(port.id, port.port); }

void FrameRouter::on(AgentLink& link, const proto::Released& released) {
  if (released.ranks) {
    // A kill of some ranks (a hung one before an in-place recovery): their exits said it all;
    // the generation's other workers live on, so this is no release of the host.
    out_.log().info("agent {}: rank(s) {} of generation {} killed (pids {})", link.host(),
                    nlohmann::json(*released.ranks).dump(), released.gen, nlohmann::json(released.killed).dump());
    return;
  }
  out_.record(
      events::ResourcesReleased{released.gen, link.host(), released.killed, released.remaining, released.ms}.to_json());
  out_.feed(supervisor::GenerationReleased{released.gen, link.host()});
}

void FrameRouter::on(AgentLink& link, const proto::HealthReply& reply) {
  // The supervisor decides what the checks mean for the run and records host.health. A remote
  // host's clock offset, which only this side can measure, is one more check.
  proto::HealthReport report = reply.report;
  if (!link.connection().local_pid()) report.checks.push_back(run::clock_offset_check(link.offset_ms()));
  events::HostHealth health{link.host(), report.moment, proto::to_string(report.verdict())};
  for (const proto::HealthCheck& check : report.checks) {
    health.checks.push_back({check.name, proto::to_string(check.verdict), check.message});
  }
  health.ms = reply.report.ms;
  out_.feed(supervisor::HostHealthReported{link.host(), std::move(health)});
}

void FrameRouter::on(AgentLink& link, const proto::GenChangedReply& reply) {
  std::vector<int> ranks(reply.ranks.begin(), reply.ranks.end());
  out_.feed(supervisor::SurvivorsCarriedOver{reply.to, link.host(), std::move(ranks), reply.pids});
}

void FrameRouter::on(AgentLink& link, const proto::AgentError& error) {
  out_.log().error("agent {}: {}", link.host(), error.message);
  out_.record(events::AgentError{link.host(), error.message}.to_json());
  // A launch step the agent could not do ends the generation now rather than at its deadline.
  if (error.about == msg::kReservePort) out_.port_reservation_failed(link.host(), error.message);
}

void FrameRouter::on(AgentLink& link, const proto::Pong& pong) {
  if (!pong.supervisor_time_ms || !pong.agent_time_ms) return;
  int64_t before = link.offset_ms();
  link.refine_offset(*pong.supervisor_time_ms, *pong.agent_time_ms, clock_.wall_ms());
  // A few ms either way is only a better round-trip sample; at thousands of hosts logging each
  // one was thousands of lines a second (and a tenth of a core for the logger thread).
  if (std::abs(link.offset_ms() - before) >= 50) {
    out_.log().info("host {}: clock offset {} ms (was {} ms; measured by ping round trip)", link.host(),
                    link.offset_ms(), before);
  }
}

void FrameRouter::on(AgentLink& link, const proto::AgentBye& bye) {
  out_.log().info("agent {} said bye: {}", link.host(), bye.reason);
}

void FrameRouter::on(AgentLink& link, const proto::AgentBeat& beat) {
  // Any frame proves liveness (receive() noted it); a beat also says which workers are stopped.
  for (const proto::AgentWorkerState& worker : beat.workers) {
    if (worker.state == "T") out_.feed(supervisor::WorkerStoppedSeen{worker.gen, worker.rank});
  }
  for (const proto::FromWorker& held : beat.worker_beats) on(link, held);
  if (beat.resources) on_host_resources(link, *beat.resources);
}

void FrameRouter::on(AgentLink& link, const proto::WorkerProtocolError& error) {
  worker_protocol_error(link, error.gen, error.rank, error.pid,
                        error.closed ? error.error + " (the agent closed the connection)" : error.error);
}

void FrameRouter::on(AgentLink& link, const proto::FromWorker& from) {
  if (!from.msg) {
    worker_protocol_error(link, from.gen, from.rank, from.pid.value_or(0), from.msg.error().message);
    // A request with a usable id still gets an answer, so the worker fails fast instead of
    // waiting out its own timeout for a reply that would never come.
    if (from.failed_request_id) {
      out_.send_store_replies({{{link.host(), from.rank},
                                from.gen,
                                proto::RequestFailed{*from.failed_request_id, from.msg.error().message}}});
    }
    return;
  }
  std::visit([&](const auto& typed) { on_worker(link, from, typed); }, *from.msg);
}

// ---- worker messages, as forwarded by an agent --------------------------------------------------

void FrameRouter::on_worker(AgentLink&, const proto::FromWorker& from, const proto::WorkerBeat& beat) {
  if (from.gen != supervisor_.generation() || !progress_.find(from.rank)) return;
  progress_.beat(from.rank, beat, clock_.wall_ms());
  std::optional<bool> in_checkpoint;
  if (beat.phase) in_checkpoint = *beat.phase == proto::WorkerPhase::checkpoint;
  out_.feed(supervisor::WorkerProgress{from.gen, from.rank, beat.step, in_checkpoint});
}

void FrameRouter::on_worker(AgentLink&, const proto::FromWorker& from, const proto::WorkerHello&) {
  if (from.gen == supervisor_.generation()) progress_.hello(from.rank);
}

void FrameRouter::on_worker(AgentLink&, const proto::FromWorker& from, const proto::CommReady&) {
  if (from.gen == supervisor_.generation()) out_.feed(supervisor::WorkerCommReady{from.gen, from.rank});
}

void FrameRouter::on_worker(AgentLink& link, const proto::FromWorker& from,
                            const proto::CheckpointCommittedReport& committed) {
  out_.record(events::CheckpointCommitted{from.gen, from.rank, link.host(), committed.step, committed.bytes,
                                          committed.ms / 1000.0}
                  .to_json());
  last_checkpoint_step_ = std::max(last_checkpoint_step_, committed.step);
  out_.feed(supervisor::CheckpointCommitted{from.gen, committed.step});
}

void FrameRouter::on_worker(AgentLink& link, const proto::FromWorker& from,
                            const proto::CheckpointRejectedReport& rejected) {
  out_.record(events::CheckpointRejected{from.gen, from.rank, link.host(), rejected.step, rejected.reason}.to_json());
  out_.feed(supervisor::CheckpointRejected{from.gen, rejected.step});
}

void FrameRouter::on_worker(AgentLink&, const proto::FromWorker&, const proto::WorkerBye&) {}

template <class StoreRequest>
void FrameRouter::on_worker(AgentLink& link, const proto::FromWorker& from, const StoreRequest& request) {
  // kv.set/get/wait/add and gen.check: the store answers the typed request, already checked.
  out_.send_store_replies(store_.handle({link.host(), from.rank}, from.gen, request, clock_.monotonic_ms()));
}

void FrameRouter::on_host_resources(AgentLink& link, const proto::HostResources& resources) {
  const std::string& host = link.host();
  for (const proto::XidEvent& xid : resources.xids) {
    out_.record(events::GpuXid{host, xid.gpu, xid.xid}.to_json());
    out_.console_line("warning: " + host + " GPU " + std::to_string(xid.gpu) + ": Xid " + std::to_string(xid.xid) +
                      " (an NVIDIA driver error; see the Xid catalogue)");
  }
  auto previous = host_resources_.find(host);
  for (const proto::GpuResources& gpu : resources.gpus) {
    if (!gpu.ecc_uncorrected || previous == host_resources_.end()) continue;
    for (const proto::GpuResources& before : previous->second.gpus) {
      if (before.index != gpu.index || !before.ecc_uncorrected || *gpu.ecc_uncorrected <= *before.ecc_uncorrected)
        continue;
      out_.record(events::GpuEccErrors{host, gpu.index, *gpu.ecc_uncorrected, *before.ecc_uncorrected}.to_json());
      out_.console_line("warning: " + host + " GPU " + std::to_string(gpu.index) + ": uncorrected ECC errors " +
                        std::to_string(*before.ecc_uncorrected) + " -> " + std::to_string(*gpu.ecc_uncorrected));
    }
  }
  proto::HostResources kept = resources;
  kept.xids.clear();
  host_resources_[host] = std::move(kept);
  write_resources_metrics();
}

void FrameRouter::write_resources_metrics() {
  int64_t now = clock_.monotonic_ms();
  if (host_resources_.empty() || now - last_resources_metrics_ms_ < kResourcesMetricsSpacingMs) return;
  last_resources_metrics_ms_ = now;
  json line = {{"ts", format_timestamp_utc(clock_.wall_ms())}, {"gen", supervisor_.generation()}};
  if (host_resources_.size() <= kMetricsDetailHosts) {
    json hosts = json::array();
    for (const auto& [host, resources] : host_resources_) {
      json entry = proto::to_json(resources);
      entry.erase("xids");
      entry["host"] = host;
      hosts.push_back(std::move(entry));
    }
    line["hosts"] = std::move(hosts);
    out_.metrics_line(std::move(line));
    return;
  }
  std::vector<double> cpu, memory_used, gpu_utilization, gpu_memory_used, gpu_power, gpu_temperature;
  size_t gpus = 0;
  json standing_out = json::array();  // hosts with uncorrected ECC errors or GPU readings that failed
  for (const auto& [host, resources] : host_resources_) {
    if (resources.cpu_percent) cpu.push_back(*resources.cpu_percent);
    if (resources.memory_used_mb) memory_used.push_back(static_cast<double>(*resources.memory_used_mb));
    int64_t uncorrected = 0;
    gpus += resources.gpus.size();
    for (const proto::GpuResources& gpu : resources.gpus) {
      if (gpu.utilization_percent) gpu_utilization.push_back(*gpu.utilization_percent);
      if (gpu.memory_used_mb) gpu_memory_used.push_back(static_cast<double>(*gpu.memory_used_mb));
      if (gpu.power_w) gpu_power.push_back(*gpu.power_w);
      if (gpu.temperature_c) gpu_temperature.push_back(static_cast<double>(*gpu.temperature_c));
      uncorrected += gpu.ecc_uncorrected.value_or(0);
    }
    if ((uncorrected > 0 || resources.gpu_error) && standing_out.size() < kMetricsDetailHosts) {
      json entry = {{"host", host}, {"ecc_uncorrected", uncorrected}};
      if (resources.gpu_error) entry["gpu_error"] = *resources.gpu_error;
      standing_out.push_back(std::move(entry));
    }
  }
  line["hosts_reporting"] = host_resources_.size();
  line["host_cpu_percent"] = spread(cpu);
  line["host_memory_used_mb"] = spread(memory_used);
  line["gpus_reporting"] = gpus;
  line["gpu_utilization_percent"] = spread(gpu_utilization);
  line["gpu_memory_used_mb"] = spread(gpu_memory_used);
  line["gpu_power_w"] = spread(gpu_power);
  line["gpu_temperature_c"] = spread(gpu_temperature);
  line["hosts_standing_out"] = std::move(standing_out);
  out_.metrics_line(std::move(line));
}

}  // namespace dtrain::run
