#pragma once
// The worker → agent messages of the worker protocol (worker/contract/wire.h) as typed structs,
// and the one parser that makes them from a line a worker wrote. A worker is untrusted: a user
// script, any language, possibly buggy. The agent parses every line here before forwarding it,
// and the supervisor parses again what an agent forwards (an agent is a peer too), so a field of
// the wrong type is a protocol error naming the field, never an exception in the loop.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "launcher/base/result.h"
#include "worker/contract/beat_metrics.h"

namespace dtrain::proto {

/// Limits of what a worker may send (beyond the line limit, kMaxLineBytes in wire.h).
inline constexpr size_t kMaxWorkerKeyBytes = 512;
inline constexpr size_t kMaxWorkerWaitKeys = 10'000;
inline constexpr size_t kMaxWorkerReasonBytes = 4096;

struct WorkerHello {
  int rank = 0;
  int gen = 0;
  std::optional<int64_t> pid{};  ///< what the worker says; the agent trusts SO_PEERCRED instead
  bool operator==(const WorkerHello&) const = default;
};
/// What a rank is doing, from the beat that says so on (wire.h: "phase").
enum class WorkerPhase { train, checkpoint };
const char* to_string(WorkerPhase phase);

struct WorkerBeat {
  int64_t step = 0;
  contract::BeatMetrics metrics{};  ///< worker/contract/beat_metrics.h
  std::optional<WorkerPhase> phase{};  ///< nullopt: unchanged
  bool operator==(const WorkerBeat&) const = default;
};
struct KvSetRequest {
  int64_t id = 0;
  std::string key{};
  std::string value{};
  bool operator==(const KvSetRequest&) const = default;
};
struct KvGetRequest {
  int64_t id = 0;
  std::string key{};
  bool operator==(const KvGetRequest&) const = default;
};
struct KvWaitRequest {
  int64_t id = 0;
  std::vector<std::string> keys{};  ///< never empty
  std::optional<int64_t> timeout_ms{};
  bool operator==(const KvWaitRequest&) const = default;
};
struct KvAddRequest {
  int64_t id = 0;
  std::string key{};
  int64_t delta = 0;
  bool operator==(const KvAddRequest&) const = default;
};
struct GenCheckRequest {
  int64_t id = 0;
  bool operator==(const GenCheckRequest&) const = default;
};
struct CommReady {
  std::optional<double> ms{};
  bool operator==(const CommReady&) const = default;
};
struct CheckpointCommittedReport {
  int64_t step = 0;
  int64_t bytes = 0;
  double ms = 0;
  bool operator==(const CheckpointCommittedReport&) const = default;
};
struct CheckpointRejectedReport {
  int64_t step = 0;
  std::string reason{};
  bool operator==(const CheckpointRejectedReport&) const = default;
};
struct WorkerBye {
  std::string reason{};
  bool operator==(const WorkerBye&) const = default;
};

using WorkerMessage = std::variant<WorkerHello, WorkerBeat, KvSetRequest, KvGetRequest, KvWaitRequest,
                                   KvAddRequest, GenCheckRequest, CommReady, CheckpointCommittedReport,
                                   CheckpointRejectedReport, WorkerBye>;

// agent → worker: the lines a worker reads (wire.h). The supervisor's store and checkpoint
// requests travel inside to_worker frames (supervisor_messages.h), the agent's own (gen.changed,
// assign) straight from the agent. The worker's client parses them (worker/runtime,
// worker/python); here they are only written.
struct StoreOk {  ///< kv.ok: a kv.set was stored
  int64_t id = 0;
};
struct StoreValue {  ///< kv.value: a kv.get's or kv.add's answer; nullopt: no such key
  int64_t id = 0;
  std::optional<std::string> value{};
};
struct StoreValues {  ///< kv.values: a kv.wait's answer, one value per key in its order
  int64_t id = 0;
  std::vector<std::string> values{};
};
struct GenOk {  ///< gen.ok: a gen.check's answer
  int64_t id = 0;
  bool current = false;
  int generation = -1;
};
struct RequestFailed {  ///< error: a request (its id) could not be done, or a bad line
  int64_t id = 0;
  std::string error{};
};
struct CheckpointRequest {  ///< ckpt.request: save at `step` (an operator's or a drill's ask)
  int64_t step = 0;
  std::string reason{};
};
struct GenerationChanged {  ///< gen.changed: in-place recovery moved this worker to `gen`
  int gen = 0;
};
struct StandbyAssign {  ///< assign: a warm standby becomes rank `rank` of `gen` with `env`
  int gen = 0;
  int rank = 0;
  std::map<std::string, std::string> env{};
};
using ToWorkerMessage = std::variant<StoreOk, StoreValue, StoreValues, GenOk, RequestFailed, CheckpointRequest,
                                     GenerationChanged, StandbyAssign>;

/// The line (without its '\n') of one agent → worker message, "type" first.
nlohmann::json to_json(const ToWorkerMessage& message);

/// Checks one decoded message: an object with a known string "type" and every field of the
/// right type and range. The Error names the message and the field:
/// `beat.step: expected an integer, got null`. Unknown extra fields are ignored (a newer worker
/// may send more). Never throws.
Result<WorkerMessage> parse_worker_message(const nlohmann::json& message);

/// The same from one line (without its '\n'): malformed JSON is an error with an excerpt whose
/// control bytes are escaped.
Result<WorkerMessage> parse_worker_line(std::string_view line);

/// A warm standby's first line, hello {standby:true, pid} (wire.h). It names no rank or
/// generation, so it is no WorkerHello and parse_worker_line refuses it.
bool is_standby_hello(std::string_view line);

/// The integer "id" of a line, if it has one: a request that parse_worker_line refused still
/// gets an error reply with it (RequestFailed), so the worker does not wait out its timeout.
std::optional<int64_t> request_id_of(std::string_view line);

/// The canonical JSON of a message (what the agent forwards): only the known fields, "type"
/// first. parse_worker_message(to_json(m)) gives m back.
nlohmann::json to_json(const WorkerMessage& message);

/// The wire "type" of a message.
const char* type_of(const WorkerMessage& message);

}  // namespace dtrain::proto
