#include "launcher/proto/worker_messages.h"

#include <limits>

#include "launcher/base/strings.h"
#include "launcher/base/json_fields.h"
#include "launcher/proto/beat_fields.h"
#include "worker/contract/wire.h"

namespace dtrain::proto {

namespace wire = contract::wire;
using nlohmann::json;

namespace {

constexpr int64_t kIntMax = std::numeric_limits<int>::max();
constexpr size_t kMaxValueBytes = 1 << 20;

template <class T>
Result<WorkerMessage> checked(FieldReader& reader, T message) {
  if (!reader.ok()) return reader.error();
  return WorkerMessage(std::move(message));
}

}  // namespace

const char* to_string(WorkerPhase phase) {
  return phase == WorkerPhase::checkpoint ? wire::kPhaseCheckpoint : wire::kPhaseTrain;
}

Result<WorkerMessage> parse_worker_message(const json& message) {
  if (!message.is_object()) {
    return Error::user(std::string("line is a JSON ") + message.type_name() + ", not an object with a \"type\"");
  }
  auto type_field = message.find("type");
  if (type_field == message.end() || !type_field->is_string()) {
    return Error::user("line has no string \"type\"" +
                       (type_field == message.end() ? std::string() : ", got " + describe_json_value(*type_field)));
  }
  const std::string& type = type_field->get_ref<const std::string&>();
  FieldReader reader(type, message);
  if (type == wire::kHello) {
    WorkerHello hello;
    hello.rank = static_cast<int>(reader.integer("rank", 0, kIntMax));
    hello.gen = static_cast<int>(reader.integer("gen", 0, kIntMax));
    hello.pid = reader.optional_integer("pid", 0, kIntMax);
    return checked(reader, std::move(hello));
  }
  if (type == wire::kBeat) {
    WorkerBeat beat;
    beat.step = reader.integer("step", 0);
    read_beat_metrics(reader, beat.metrics);
    if (auto phase = reader.optional_string("phase", 64)) {
      if (*phase == wire::kPhaseTrain) beat.phase = WorkerPhase::train;
      else if (*phase == wire::kPhaseCheckpoint) beat.phase = WorkerPhase::checkpoint;
      else reader.fail("phase", "expected \"train\" or \"checkpoint\"", *message.find("phase"));
    }
    return checked(reader, std::move(beat));
  }
  if (type == wire::kKvSet) {
    KvSetRequest set;
    set.id = reader.integer("id");
    set.key = reader.string("key", kMaxWorkerKeyBytes);
    set.value = reader.string("value", kMaxValueBytes);
    return checked(reader, std::move(set));
  }
  if (type == wire::kKvGet) {
    KvGetRequest get;
    get.id = reader.integer("id");
    get.key = reader.string("key", kMaxWorkerKeyBytes);
    return checked(reader, std::move(get));
  }
  if (type == wire::kKvWait) {
    KvWaitRequest wait;
    wait.id = reader.integer("id");
    wait.keys = reader.string_array("keys", kMaxWorkerWaitKeys, kMaxWorkerKeyBytes);
    wait.timeout_ms = reader.optional_integer("timeout_ms", 0);
    if (reader.ok() && wait.keys.empty()) reader.fail_text("keys", "expected at least one key");
    return checked(reader, std::move(wait));
  }
  if (type == wire::kKvAdd) {
    KvAddRequest add;
    add.id = reader.integer("id");
    add.key = reader.string("key", kMaxWorkerKeyBytes);
    add.delta = reader.integer("delta");
    return checked(reader, std::move(add));
  }
  if (type == wire::kGenCheck) {
    GenCheckRequest check;
    check.id = reader.integer("id");
    return checked(reader, std::move(check));
  }
  if (type == wire::kCommReady) {
    CommReady ready;
    ready.ms = reader.optional_number("ms");
    return checked(reader, std::move(ready));
  }
  if (type == wire::kCkptCommitted) {
    CheckpointCommittedReport committed;
    committed.step = reader.integer("step", 0);
    committed.bytes = reader.optional_integer("bytes", 0).value_or(0);
    committed.ms = reader.optional_number("ms").value_or(0);
    return checked(reader, std::move(committed));
  }
  if (type == wire::kCkptRejected) {
    CheckpointRejectedReport rejected;
    rejected.step = reader.integer("step", 0);
    rejected.reason = reader.optional_string("reason", kMaxWorkerReasonBytes).value_or("");
    return checked(reader, std::move(rejected));
  }
  if (type == wire::kBye) {
    WorkerBye bye;
    bye.reason = reader.optional_string("reason", kMaxWorkerReasonBytes).value_or("");
    return checked(reader, std::move(bye));
  }
  return Error::user("unknown message type '" + printable(type, 40) +
                     "'; expected hello, beat, kv.set, kv.get, kv.wait, kv.add, gen.check, comm.ready, "
                     "ckpt.committed, ckpt.rejected or bye");
}

Result<WorkerMessage> parse_worker_line(std::string_view line) {
  json message = json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (message.is_discarded()) {
    return Error::user("malformed JSON line '" + printable(line, 80) + "'");
  }
  return parse_worker_message(message);
}

bool is_standby_hello(std::string_view line) {
  json message = json::parse(line, nullptr, /*allow_exceptions=*/false);
  return json_string(message, "type") == wire::kHello && json_bool(message, "standby");
}

std::optional<int64_t> request_id_of(std::string_view line) {
  json message = json::parse(line, nullptr, /*allow_exceptions=*/false);
  const json* id = json_member(message, "id");
  if (id == nullptr || !id->is_number_integer()) return std::nullopt;
  if (id->is_number_unsigned() && id->get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return std::nullopt;  // no reply could name it
  }
  return id->get<int64_t>();
}

namespace {

struct ToJson {
  json operator()(const WorkerHello& m) const {
    json out = {{"type", wire::kHello}, {"rank", m.rank}, {"gen", m.gen}};
    put_optional(out, "pid", m.pid);
    return out;
  }
  json operator()(const WorkerBeat& m) const {
    json out = {{"type", wire::kBeat}, {"step", m.step}};
    contract::write_beat_metrics(m.metrics, out);
    if (m.phase) out["phase"] = to_string(*m.phase);
    return out;
  }
  json operator()(const KvSetRequest& m) const {
    return {{"type", wire::kKvSet}, {"id", m.id}, {"key", m.key}, {"value", m.value}};
  }
  json operator()(const KvGetRequest& m) const { return {{"type", wire::kKvGet}, {"id", m.id}, {"key", m.key}}; }
  json operator()(const KvWaitRequest& m) const {
    json out = {{"type", wire::kKvWait}, {"id", m.id}, {"keys", m.keys}};
    put_optional(out, "timeout_ms", m.timeout_ms);
    return out;
  }
  json operator()(const KvAddRequest& m) const {
    return {{"type", wire::kKvAdd}, {"id", m.id}, {"key", m.key}, {"delta", m.delta}};
  }
  json operator()(const GenCheckRequest& m) const { return {{"type", wire::kGenCheck}, {"id", m.id}}; }
  json operator()(const CommReady& m) const {
    json out = {{"type", wire::kCommReady}};
    put_optional(out, "ms", m.ms);
    return out;
  }
  json operator()(const CheckpointCommittedReport& m) const {
    return {{"type", wire::kCkptCommitted}, {"step", m.step}, {"bytes", m.bytes}, {"ms", m.ms}};
  }
  json operator()(const CheckpointRejectedReport& m) const {
    return {{"type", wire::kCkptRejected}, {"step", m.step}, {"reason", m.reason}};
  }
  json operator()(const WorkerBye& m) const { return {{"type", wire::kBye}, {"reason", m.reason}}; }


  json operator()(const StoreOk& m) const { return {{"type", wire::kKvOk}, {"id", m.id}}; }
  json operator()(const StoreValue& m) const {
    return {{"type", wire::kKvValue}, {"id", m.id}, {"value", m.value ? json(*m.value) : json(nullptr)}};
  }
  json operator()(const StoreValues& m) const { return {{"type", wire::kKvValues}, {"id", m.id}, {"values", m.values}}; }
  json operator()(const GenOk& m) const {
    return {{"type", wire::kGenOk}, {"id", m.id}, {"current", m.current}, {"generation", m.generation}};
  }
  json operator()(const RequestFailed& m) const { return {{"type", wire::kError}, {"id", m.id}, {"error", m.error}}; }
  json operator()(const CheckpointRequest& m) const {
    return {{"type", wire::kCkptRequest}, {"step", m.step}, {"reason", m.reason}};
  }
  json operator()(const GenerationChanged& m) const { return {{"type", wire::kGenChanged}, {"gen", m.gen}}; }
  json operator()(const StandbyAssign& m) const {
    json env = json::object();
    for (const auto& [name, value] : m.env) env[name] = value;
    return {{"type", wire::kAssign}, {"gen", m.gen}, {"rank", m.rank}, {"env", std::move(env)}};
  }
};

}  // namespace

json to_json(const WorkerMessage& message) { return std::visit(ToJson{}, message); }
json to_json(const ToWorkerMessage& message) { return std::visit(ToJson{}, message); }

const char* type_of(const WorkerMessage& message) {
  static constexpr const char* kNames[] = {wire::kHello,    wire::kBeat,      wire::kKvSet,
                                           wire::kKvGet,    wire::kKvWait,    wire::kKvAdd,
                                           wire::kGenCheck, wire::kCommReady, wire::kCkptCommitted,
                                           wire::kCkptRejected, wire::kBye};
  static_assert(std::size(kNames) == std::variant_size_v<WorkerMessage>);
  return kNames[message.index()];
}

}  // namespace dtrain::proto
