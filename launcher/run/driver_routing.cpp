// Frame → typed message → supervisor Event: the driver's routing. Every agent frame is parsed
// once (proto::AgentFrameParser, which also parses a worker's message the agent forwarded: an
// agent is a peer too) and dispatched by type to one handler, a worker's message likewise.
// Nothing below reads raw JSON; a frame that does not parse is a protocol.error event naming
// its sender, and only a flood of them fails that sender.

#include <cmath>

#include "launcher/base/strings.h"
#include "launcher/base/version.h"
#include "launcher/proto/messages.h"
#include "launcher/run/driver.h"
#include "launcher/base/base64.h"
#include "launcher/base/events.h"
#include "worker/contract/wire.h"

namespace dtrain::run {

namespace msg = proto::msg;
using nlohmann::json;

void RunDriver::route_frame(AgentLink& link, std::string_view body) {
  Result<proto::AgentMessage> message = frame_parser_.parse(body);
  if (!message) {
    agent_protocol_error(link, message.error().message);
    return;
  }
  std::visit([&](const auto& typed) { on_agent_message(link, typed); }, *message);
}

void RunDriver::agent_protocol_error(AgentLink& link, const std::string& problem) {
  int count = ++protocol_errors_["agent " + link.host()];
  if (count > kMaxProtocolErrorsPerSender) return;  // the host is lost already
  record(events::ProtocolError{"agent", link.host(), problem, count}.to_json());
  if (count == 1) {
    recorder_.console_line("warning: the agent on " + link.host() +
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
  record(events::ProtocolError{"worker", link.host(), problem, count, pid, gen, rank}.to_json());
  if (count == 1) {
    recorder_.console_line("warning: " + (rank ? "rank " + std::to_string(*rank) + " " : std::string()) +
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
  recorder_.write_file(run_.host_facts_path(link.host()),
                       json{{"host", link.host()}, {"agent_pid", hello.pid}, {"version", hello.version},
                               {"clock_offset_ms", link.offset_ms()}, {"facts", link.facts}}
                              .dump(2, ' ', false, json::error_handler_t::replace),
                       Durability::kUnsynced);  // re-made at every connect: no fsync per host
  record(events::HostConnected{link.host(), hello.pid, hello.version, link.offset_ms()}.to_json());
  record(events::HostFacts{link.host(), link.facts}.to_json());
  feed(supervisor::HostConnected{link.host()});
}

void RunDriver::on_agent_message(AgentLink&, const proto::WorkerStartedReport& started) {
  feed(supervisor::WorkerStarted{started.gen, started.rank, static_cast<int>(started.pid)});
}

void RunDriver::on_agent_message(AgentLink& link, const proto::WorkerSpawnFailedReport& failed) {
  record(events::WorkerSpawnFailed{failed.rank, link.host(), failed.error}.to_json());
  feed(supervisor::WorkerSpawnFailed{failed.gen, failed.rank, failed.error});
}

void RunDriver::on_agent_message(AgentLink& link, const proto::WorkerExitReport& exit) {
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
  event.log = log_path(exit.rank);
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
  if (exit.error) {  // the rank's TORCHELASTIC_ERROR_FILE: the exception, not just the exit code
    event.error =
        events::WorkerError{exit.error->message, exit.error->type, exit.error->traceback, exit.error->timestamp};
    exited.error_type = exit.error->type;
    exited.error_message = exit.error->message;
    exited.traceback = exit.error->traceback;
  }
  record(event.to_json());
  store_.forget({link.host(), exit.rank});  // its pending waits would be answered to nobody
  exited.observed_ms = link.to_supervisor_time(exit.agent_time_ms.value_or(clock_.wall_ms()));
  feed(exited);
}

void RunDriver::on_agent_message(AgentLink& link, const proto::WorkerLogLine& log) {
  recorder_.rank_output(log.rank, log.gen, log.line + "\n");
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
  record(events::CommWarn{log.gen, log.rank, link.host(), log.line}.to_json());
}

void RunDriver::flush_comm_warn(int rank, CommWarnWindow& window) {
  if (window.repeated > 0) {
    record(events::CommWarn{window.gen, rank, window.host, window.last_line, window.repeated,
                            static_cast<double>(kCommWarnWindowMs) / 1000.0,
                            std::to_string(window.repeated) + " more NCCL WARN lines from this rank within " +
                                format_duration(Millis(kCommWarnWindowMs)) + "; the last is shown (all are in its log)"}
               .to_json());
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
    // samples/gen<g>-rank<r>.txt, then the event naming it (or the write's error).
    recorder_.write_file_then_record(
        run_.path() + "/samples/gen" + std::to_string(sample.gen) + "-rank" + std::to_string(sample.rank) + ".txt",
        *sample.text, events::WorkerSample{sample.rank, link.host(), sample.pid}.to_json());
  } else {
    record(events::WorkerSample{sample.rank, link.host(), sample.pid,
                                sample.error.value_or("the agent sent a sample without text")}
               .to_json());
  }
}

void RunDriver::on_agent_message(AgentLink& link, const proto::FlightRecorderDump& dump) {
  // Next to the stack sample of the same rank: samples/gen<g>-rank<r>.flight-recorder (a pickle;
  // PyTorch's fr_trace reads a directory of them).
  events::HangDump event{dump.gen, dump.rank, link.host(), dump.pid, dump.bytes};
  std::string data;
  if (dump.data_base64 && !base64_decode(*dump.data_base64, data)) {
    event.error = "the agent's dump is not valid base64";
    return record(event.to_json());
  }
  if (dump.data_base64) {
    recorder_.write_file_then_record(run_.path() + "/samples/gen" + std::to_string(dump.gen) + "-rank" +
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
  record(event.to_json());
}

void RunDriver::on_agent_message(AgentLink&, const proto::PortReply& port) {
  if (port.id == pending_port_id_ && pending_start_) spawn_generation(port.port);
}

void RunDriver::on_agent_message(AgentLink& link, const proto::Released& released) {
  if (released.ranks) {
    // A kill of some ranks (a hung one before an in-place recovery): their exits said it all;
    // the generation's other workers live on, so this is no release of the host.
    log().info("agent {}: rank(s) {} of generation {} killed (pids {})", link.host(),
               nlohmann::json(*released.ranks).dump(), released.gen, nlohmann::json(released.killed).dump());
    return;
  }
  record(events::ResourcesReleased{released.gen, link.host(), released.killed, released.remaining, released.ms}
             .to_json());
  feed(supervisor::GenerationReleased{released.gen, link.host()});
}

void RunDriver::on_agent_message(AgentLink& link, const proto::GenChangedReply& reply) {
  std::vector<int> ranks(reply.ranks.begin(), reply.ranks.end());
  feed(supervisor::SurvivorsCarriedOver{reply.to, link.host(), std::move(ranks), reply.pids});
}

void RunDriver::on_agent_message(AgentLink& link, const proto::AgentError& error) {
  log().error("agent {}: {}", link.host(), error.message);
  record(events::AgentError{link.host(), error.message}.to_json());
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
  // A few ms either way is only a better round-trip sample; at thousands of hosts logging each
  // one was thousands of lines a second (and a tenth of a core for the logger thread).
  if (std::abs(link.offset_ms() - before) >= 50) {
    log().info("host {}: clock offset {} ms (was {} ms; measured by ping round trip)", link.host(),
               link.offset_ms(), before);
  }
}

void RunDriver::on_agent_message(AgentLink& link, const proto::AgentBye& bye) {
  log().info("agent {} said bye: {}", link.host(), bye.reason);
}

void RunDriver::on_agent_message(AgentLink& link, const proto::AgentBeat& beat) {
  // Any frame proves liveness (receive() noted it); a beat also says which workers are stopped.
  for (const proto::AgentWorkerState& worker : beat.workers) {
    if (worker.state == "T") feed(supervisor::WorkerStoppedSeen{worker.gen, worker.rank});
  }
  for (const proto::FromWorker& held : beat.worker_beats) on_agent_message(link, held);
  if (beat.resources) on_host_resources(link, *beat.resources);
}

void RunDriver::on_agent_message(AgentLink& link, const proto::WorkerProtocolError& error) {
  worker_protocol_error(link, error.gen, error.rank, error.pid,
                        error.closed ? error.error + " (the agent closed the connection)" : error.error);
}

void RunDriver::on_agent_message(AgentLink& link, const proto::FromWorker& from) {
  if (!from.msg) {
    worker_protocol_error(link, from.gen, from.rank, from.pid.value_or(0), from.msg.error().message);
    // A request with a usable id still gets an answer, so the worker fails fast instead of
    // waiting out its own timeout for a reply that would never come.
    if (from.failed_request_id) {
      send_store_replies({{{link.host(), from.rank}, from.gen,
                           json{{"type", contract::wire::kError}, {"id", *from.failed_request_id},
                                {"error", from.msg.error().message}}}});
    }
    return;
  }
  std::visit([&](const auto& typed) { on_worker_message(link, from, typed); }, *from.msg);
}

// ---- worker messages, as forwarded by an agent --------------------------------------------------

void RunDriver::on_worker_message(AgentLink&, const proto::FromWorker& from, const proto::WorkerBeat& beat) {
  if (from.gen != supervisor_.generation() || from.rank >= static_cast<int>(metrics_.size())) return;
  RankMetrics& metrics = metrics_[static_cast<size_t>(from.rank)];
  metrics.last_beat_wall_ms = clock_.wall_ms();
  metrics.speaks_protocol = true;
  if (beat.loss) metrics.loss = *beat.loss;
  if (beat.step_ms) metrics.step_ms = *beat.step_ms;
  if (beat.comm_ms) metrics.comm_ms = *beat.comm_ms;
  if (beat.data_ms) metrics.data_ms = *beat.data_ms;
  if (beat.samples) metrics.samples = *beat.samples;
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
  record(events::CheckpointCommitted{from.gen, from.rank, link.host(), committed.step, committed.bytes,
                                     committed.ms / 1000.0}
             .to_json());
  last_checkpoint_step_ = std::max(last_checkpoint_step_, committed.step);
  feed(supervisor::CheckpointCommitted{from.gen, committed.step});
}

void RunDriver::on_worker_message(AgentLink& link, const proto::FromWorker& from,
                                  const proto::CheckpointRejectedReport& rejected) {
  record(events::CheckpointRejected{from.gen, from.rank, link.host(), rejected.step, rejected.reason}.to_json());
  feed(supervisor::CheckpointRejected{from.gen, rejected.step});
}

void RunDriver::on_worker_message(AgentLink&, const proto::FromWorker&, const proto::WorkerBye&) {}

template <class StoreRequest>
void RunDriver::on_worker_message(AgentLink& link, const proto::FromWorker& from, const StoreRequest& request) {
  // kv.set/get/wait/add and gen.check: the store answers the canonical, already checked form.
  send_store_replies(store_.handle({link.host(), from.rank}, from.gen, proto::to_json(proto::WorkerMessage(request)),
                                   clock_.monotonic_ms()));
}

}  // namespace dtrain::run
