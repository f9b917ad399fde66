#pragma once
// The agent → supervisor messages (messages.h is the catalogue) as typed structs, and the one
// parser that makes them from a decoded frame. The supervisor reads nothing an agent sent except
// through parse_agent_message(): an agent is a peer process (another version, another host, a
// corrupted stream), and a field of the wrong type must be a protocol error naming the host and
// the field, never an exception in the event loop.

#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "launcher/base/result.h"
#include "launcher/proto/host_health.h"
#include "launcher/proto/relay_messages.h"
#include "launcher/proto/stack_fingerprint.h"
#include "launcher/proto/worker_messages.h"

namespace dtrain::proto {

struct AgentHello {
  int protocol = 0;
  std::string version{};
  std::string host{};
  int64_t pid = 0;
  std::optional<int64_t> agent_time_ms{};
  std::optional<std::string> socket{};
  std::optional<std::string> attach_socket{};  ///< with config.reattach_ms: where a re-attach connects
  nlohmann::json facts = nlohmann::json::object();  ///< checked: an object; fields read with json_fields.h
  /// The host's software stack, when config asked for it.
  std::optional<StackFingerprint> stack{};
  /// A "stack" member that did not parse: the hello still does (the host connects, its stack
  /// is unknown) and the driver records the error naming the host. Never sent.
  std::optional<std::string> stack_error{};
  bool operator==(const AgentHello&) const = default;
};
struct WorkerStartedReport {
  int gen = 0;
  int rank = 0;
  int64_t pid = 0;
  std::optional<int> local_rank{};
  std::optional<int64_t> agent_time_ms{};  ///< when the worker was forked (or assigned), agent clock
  bool standby = false;                  ///< a warm standby became this worker (assign)
  bool operator==(const WorkerStartedReport&) const = default;
};
struct WorkerSpawnFailedReport {
  int gen = 0;
  int rank = 0;
  std::string error{};
  bool operator==(const WorkerSpawnFailedReport&) const = default;
};
/// A worker's structured error (exit.error): what the agent read from the rank's
/// TORCHELASTIC_ERROR_FILE (torch's @record, or dtrain's Python bootstrap) after it failed.
struct WorkerErrorRecord {
  std::optional<std::string> type{};       ///< "ValueError" (absent when the record has no "Type: ")
  std::string message{};                   ///< the text after "Type: ", or the whole message
  std::optional<std::string> traceback{};  ///< Python's formatted traceback
  std::optional<int64_t> timestamp{};      ///< unix seconds, the worker's clock
  bool operator==(const WorkerErrorRecord&) const = default;
};
struct WorkerExitReport {
  int gen = 0;
  int rank = 0;
  int64_t pid = 0;
  std::optional<int> code{};               ///< exactly one of code and signal is set
  std::optional<int> signal{};
  std::optional<std::string> signal_name{};
  std::optional<int64_t> agent_time_ms{};
  std::vector<std::string> tail{};
  bool killed_by_agent = false;
  std::optional<WorkerErrorRecord> error{};
  std::optional<int> local_rank{};
  bool core_dumped = false;
  bool operator==(const WorkerExitReport&) const = default;
};
struct WorkerLogLine {
  int gen = 0;
  int rank = 0;
  std::string stream{};
  std::string line{};
  bool operator==(const WorkerLogLine&) const = default;
};
/// A worker-protocol message the agent forwarded, parsed here with parse_worker_message (the
/// agent parsed it already, but an agent is a peer too). A message that does not parse is the
/// worker's fault, not the agent's: `msg` then holds the error and the frame still parses.
struct FromWorker {
  int gen = 0;
  int rank = 0;
  std::optional<int64_t> pid{};
  Result<WorkerMessage> msg = Error::user("no message");
  /// The integer "id" of a message that did not parse, if it had one: a request that still
  /// gets an error reply, so the worker fails fast instead of waiting out its timeout.
  std::optional<int64_t> failed_request_id{};
  /// Equal messages, or equal error texts.
  bool operator==(const FromWorker& other) const;
};
struct AgentWorkerState {
  int gen = -1;
  int rank = -1;
  int64_t pid = 0;
  bool alive = false;
  std::string state{};
  bool operator==(const AgentWorkerState&) const = default;
};

/// One GPU as NVML (or nvidia-smi) reported it at a sample. A value the source could not read
/// (a consumer GPU has no ECC, a power reading can be "[N/A]") is absent, not zero.
struct GpuResources {
  int index = 0;
  std::optional<double> utilization_percent{};
  std::optional<int64_t> memory_used_mb{};
  std::optional<int64_t> memory_total_mb{};
  std::optional<double> power_w{};
  std::optional<int64_t> temperature_c{};
  std::optional<int64_t> ecc_corrected{};    ///< volatile (since the driver loaded) total
  std::optional<int64_t> ecc_uncorrected{};  ///< volatile total
  bool operator==(const GpuResources&) const = default;
};
/// One worker and every process below it (its data loaders, a shell's children).
struct WorkerResources {
  int gen = -1;
  int rank = -1;
  int64_t pid = 0;
  double cpu_percent = 0;  ///< of one core, since the previous sample: 250 = two and a half cores
  int64_t rss_mb = 0;
  int processes = 1;
  bool operator==(const WorkerResources&) const = default;
};
/// An Xid (NVIDIA driver error) event NVML delivered since the previous sample.
struct XidEvent {
  int gpu = 0;
  int64_t xid = 0;
  std::optional<int64_t> agent_time_ms{};
  bool operator==(const XidEvent&) const = default;
};
/// What an agent measured on its host at one heartbeat interval (beat.resources; messages.h).
struct HostResources {
  std::optional<int64_t> agent_time_ms{};
  std::optional<double> cpu_percent{};  ///< of the whole host, 0-100, since the previous sample
  std::optional<int64_t> memory_used_mb{};
  std::optional<int64_t> memory_total_mb{};
  std::vector<WorkerResources> workers{};
  std::vector<GpuResources> gpus{};
  std::string gpu_source{};               ///< "nvml", "nvidia-smi" or "" (no GPU readings)
  std::optional<std::string> gpu_error{};  ///< why there are none, when a source was tried and failed
  std::vector<XidEvent> xids{};
  bool operator==(const HostResources&) const = default;
};
/// Most entries in each of beat.resources' workers, gpus and xids. A host has at most a few
/// thousand workers and GPUs; anything beyond is a broken agent, not a big host.
inline constexpr size_t kMaxResourceItems = 65'536;

/// beat.resources as the agent sends it (and as metrics.jsonl records it): absent values are
/// left out. parse_agent_message() reads it back.
nlohmann::json to_json(const HostResources& resources);

struct AgentBeat {
  std::optional<int64_t> agent_time_ms{};
  std::vector<AgentWorkerState> workers{};
  std::optional<double> load1;
  std::optional<int64_t> mem_available_mb{};
  /// Worker beats held for this beat (config batch_beats), each as a from_worker would carry it.
  std::vector<FromWorker> worker_beats{};
  /// The host's resources (CPU, memory, workers, GPUs) sampled since the previous beat.
  std::optional<HostResources> resources{};
  bool operator==(const AgentBeat&) const = default;
};
struct Pong {
  std::optional<int64_t> id{};
  std::optional<int64_t> agent_time_ms{};
  std::optional<int64_t> supervisor_time_ms{};
  bool operator==(const Pong&) const = default;
};
struct PortReply {
  int64_t id = 0;
  int port = 0;
  bool operator==(const PortReply&) const = default;
};
struct SampleReply {
  std::optional<int64_t> id{};
  int gen = -1;
  int rank = -1;
  int64_t pid = 0;
  std::optional<std::string> text{};
  std::optional<std::string> error{};
  bool operator==(const SampleReply&) const = default;
};
/// The agent carried its live workers of generation `from` over to `to` (in-place recovery).
struct GenChangedReply {
  std::optional<int64_t> id{};
  int from = 0;
  int to = 0;
  std::vector<int64_t> ranks{};
  std::vector<int64_t> pids{};
  bool operator==(const GenChangedReply&) const = default;
};
struct Released {
  /// Present when the kill named ranks: only those workers are gone, not the generation.
  std::optional<std::vector<int64_t>> ranks{};
  int gen = 0;
  std::vector<int64_t> killed{};
  int64_t remaining = 0;
  int64_t ms = 0;
  std::vector<int64_t> remaining_pids{};
  bool operator==(const Released&) const = default;
};
/// The agent could not do what was asked (`about` names the request), or, without `about`, a
/// protocol error after which it fences.
struct AgentError {
  std::string message{};
  std::optional<std::string> about{};
  std::optional<int64_t> id{};  ///< the request's id (reserve_port)
  std::optional<int> gen{};     ///< the worker a to_worker was for
  std::optional<int> rank{};
  bool operator==(const AgentError&) const = default;
};
struct AgentBye {
  std::string reason{};
  std::vector<int64_t> killed{};  ///< pids the fence signalled
  bool operator==(const AgentBye&) const = default;
};
/// A rank's PyTorch flight-recorder dump, asked for before a hung generation is killed (dump
/// request: messages.h). `data_base64` holds the file's bytes unless it was too large to ship;
/// then `kept_path` names it on the agent's host.
struct FlightRecorderDump {
  std::optional<int64_t> id{};
  int gen = -1;
  int rank = -1;
  int64_t pid = 0;
  int64_t bytes = 0;                    ///< the dump file's size
  std::optional<std::string> data_base64;  ///< its content (at most kMaxDumpBytes), base64
  std::optional<std::string> kept_path{}; ///< where a larger one stays, on the agent's host
  std::optional<std::string> error{};     ///< why there is none (no pipe, no answer in time)
  std::optional<std::string> note{};      ///< a problem asking for this dump, which was older
  bool operator==(const FlightRecorderDump&) const = default;
};
/// The agent dropped a worker line it could not parse (worker_messages.h). gen and rank are
/// absent when the worker had not said hello yet; pid is the peer's (SO_PEERCRED).
struct WorkerProtocolError {
  std::optional<int> gen{};
  std::optional<int> rank{};
  int64_t pid = 0;
  std::string error{};
  bool closed = false;  ///< the agent closed that connection (framing lost, or no hello)
  bool operator==(const WorkerProtocolError&) const = default;
};

/// The checks the agent ran: after hello when config asked (id 0, moment "start"), and as the
/// answer to each health request (its id).
struct HealthReply {
  int64_t id = 0;
  HealthReport report{};
  bool operator==(const HealthReply&) const = default;
};

/// One worker a re-attached agent still runs.
struct ReattachedWorker {
  int gen = 0;
  int rank = 0;
  int64_t pid = 0;
  bool operator==(const ReattachedWorker&) const = default;
};
/// The first frame of a re-attached agent (config.reattach_ms): it kept its workers while its
/// channel was down. `exits` repeats the exit reports of the generations it still holds: one
/// that went out into the lost channel was never read, and the reader skips those it knows.
struct ReattachedReport {
  std::string host{};
  int64_t pid = 0;
  int64_t detached_ms = 0;
  std::string reason{};  ///< why its channel ended, as the agent saw it
  std::vector<ReattachedWorker> workers{};
  std::vector<WorkerExitReport> exits{};
  bool operator==(const ReattachedReport&) const = default;
};

/// One beat or pong of a host a relay carries, as the host's agent sent it (relay_batch).
struct RelayedMessage {
  std::string host{};
  std::variant<AgentBeat, Pong> message{};
  bool operator==(const RelayedMessage&) const = default;
};
/// A relay's hosts' beats and pongs since its previous batch, in the order each host sent them
/// (relay_messages.h: relay_batch). Everything else a host sends travels in relay_from.
struct RelayBatchReport {
  std::vector<RelayedMessage> messages{};
  bool operator==(const RelayBatchReport&) const = default;
};

using AgentMessage = std::variant<AgentHello, WorkerStartedReport, WorkerSpawnFailedReport, WorkerExitReport,
                                  WorkerLogLine, FromWorker, AgentBeat, Pong, PortReply, SampleReply,
                                  Released, AgentError, AgentBye, WorkerProtocolError, FlightRecorderDump,
                                  GenChangedReply, HealthReply, RelayFromReport, RelayClosedReport,
                                  ReattachedReport, RelayBatchReport>;

/// The frame of one message: "type" first, then its fields (absent optionals left out). A
/// FromWorker must hold a message (one that holds an Error is the supervisor's reading of a bad
/// line, never sent). parse_agent_message(to_json(m)) == m.
nlohmann::json to_json(const AgentMessage& message);

/// The wire "type" of a message (messages.h msg::).
const char* type_of(const AgentMessage& message);

/// Checks one decoded frame (an object with a string "type"; frame.h guarantees that much).
/// The Error names the message and the field: `exit.rank: expected an integer, got null`.
/// Unknown extra fields are ignored; an unknown type is an error. Never throws.
Result<AgentMessage> parse_agent_message(const nlohmann::json& frame);

}  // namespace dtrain::proto
