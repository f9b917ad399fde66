#include "launcher/proto/agent_messages.h"

#include <limits>

#include "launcher/base/strings.h"
#include "launcher/base/json_fields.h"
#include "launcher/proto/messages.h"
#include "launcher/proto/worker_messages.h"

namespace dtrain::proto {

using nlohmann::json;

namespace {

constexpr int64_t kIntMax = std::numeric_limits<int>::max();
constexpr size_t kMaxTailLines = 10'000;
constexpr size_t kMaxPids = 1'000'000;
constexpr size_t kMaxLogLineBytes = 1 << 20;
constexpr size_t kMaxErrorTextBytes = kMaxErrorFileBytes;

template <class T>
Result<AgentMessage> checked(FieldReader& reader, T message) {
  if (!reader.ok()) return reader.error();
  return AgentMessage(std::move(message));
}

int read_gen(FieldReader& reader) { return static_cast<int>(reader.integer("gen", -1, kIntMax)); }
int read_rank(FieldReader& reader) { return static_cast<int>(reader.integer("rank", 0, kIntMax)); }
int64_t read_pid(FieldReader& reader) { return reader.integer("pid", 0, kIntMax); }

Result<AgentMessage> parse_hello(FieldReader& reader) {
  AgentHello hello;
  hello.protocol = static_cast<int>(reader.integer("protocol", 0, kIntMax));
  hello.version = reader.optional_string("version", 256).value_or("");
  hello.host = reader.optional_string("host", 4096).value_or("");
  hello.pid = reader.optional_integer("pid", 0, kIntMax).value_or(0);
  hello.agent_time_ms = reader.optional_integer("agent_time_ms");
  hello.socket = reader.optional_string("socket", 4096);
  hello.attach_socket = reader.optional_string("attach_socket", 4096);
  if (const json* facts = reader.optional_object("facts")) hello.facts = *facts;
  if (const json* stack = reader.optional_value("stack")) {
    Result<StackFingerprint> fingerprint = parse_stack_fingerprint(*stack);
    if (fingerprint) hello.stack = std::move(*fingerprint);
    else hello.stack_error = fingerprint.error().message;
  }
  return checked(reader, std::move(hello));
}

// exit.error: the agent made it from a file the worker wrote, so it is checked like the rest.
std::optional<WorkerErrorRecord> read_error_record(FieldReader& reader) {
  const json* error = reader.optional_object("error");
  if (error == nullptr || !reader.ok()) return std::nullopt;
  FieldReader fields("exit.error", *error);
  WorkerErrorRecord record;
  record.type = fields.optional_string("type", 256);
  record.message = fields.string("message", kMaxErrorTextBytes);
  record.traceback = fields.optional_string("traceback", kMaxErrorTextBytes);
  record.timestamp = fields.optional_integer("timestamp", 0);
  if (!fields.ok()) {
    reader.fail_text("error", fields.error().message);
    return std::nullopt;
  }
  return record;
}

Result<AgentMessage> parse_exit(FieldReader& reader, const json& frame) {
  WorkerExitReport exit;
  exit.gen = read_gen(reader);
  exit.rank = read_rank(reader);
  exit.pid = reader.optional_integer("pid", 0, kIntMax).value_or(0);
  std::optional<int64_t> signal = reader.optional_integer("signal", 1, 128);
  std::optional<int64_t> code = reader.optional_integer("code", -1, 255);
  if (signal) {
    exit.signal = static_cast<int>(*signal);
    exit.signal_name = reader.optional_string("signal_name", 64);
  } else if (code) {
    exit.code = static_cast<int>(*code);
  } else if (reader.ok()) {
    reader.fail("code", "expected an exit code or a signal", frame.contains("code") ? frame["code"] : json());
  }
  exit.agent_time_ms = reader.optional_integer("agent_time_ms");
  exit.tail = reader.optional_string_array("tail", kMaxTailLines, kMaxLogLineBytes).value_or(std::vector<std::string>());
  exit.killed_by_agent = reader.optional_boolean("killed_by_agent").value_or(false);
  exit.error = read_error_record(reader);
  if (auto local_rank = reader.optional_integer("local_rank", 0, kIntMax)) exit.local_rank = static_cast<int>(*local_rank);
  exit.core_dumped = reader.optional_boolean("core_dumped").value_or(false);
  return checked(reader, std::move(exit));
}

// The exits inside are exit frames, read by parse_exit like any other.
Result<AgentMessage> parse_reattached(FieldReader& reader) {
  ReattachedReport report;
  report.host = reader.string("host", 4096);
  report.pid = read_pid(reader);
  report.detached_ms = reader.integer("detached_ms", 0);
  report.reason = reader.optional_string("reason", 4096).value_or("");
  const json* workers = reader.optional_array("workers");
  const json* exits = reader.optional_array("exits");
  if (!reader.ok()) return reader.error();
  if ((workers && workers->size() > kMaxPids) || (exits && exits->size() > kMaxPids)) {
    reader.fail_text(workers && workers->size() > kMaxPids ? "workers" : "exits", "more than " + std::to_string(kMaxPids) + " entries");
    return reader.error();
  }
  for (const json& item : workers ? *workers : json::array()) {
    FieldReader entry("reattached.workers[]", item);
    ReattachedWorker worker{read_gen(entry), read_rank(entry), read_pid(entry)};
    if (!entry.ok()) return entry.error();
    report.workers.push_back(worker);
  }
  for (const json& item : exits ? *exits : json::array()) {
    FieldReader entry("reattached.exits[]", item);
    if (!entry.ok()) return entry.error();
    Result<AgentMessage> exit = parse_exit(entry, item);
    if (!exit) return exit.error();
    report.exits.push_back(std::get<WorkerExitReport>(std::move(*exit)));
  }
  return AgentMessage(std::move(report));
}

std::optional<double> read_percent(FieldReader& reader, const char* key) {
  std::optional<double> value = reader.optional_number(key);
  if (value && (*value < 0 || *value > 1e6)) reader.fail(key, "a percentage >= 0", *value);
  return value;
}

std::optional<int64_t> read_count(FieldReader& reader, const char* key) {
  return reader.optional_integer(key, 0);
}

// A problem is returned as the innermost reader words it ("beat.resources.gpus[].index: ...").
Result<std::optional<HostResources>> read_resources(FieldReader& beat) {
  const json* object = beat.optional_object("resources");
  if (object == nullptr || !beat.ok()) return std::optional<HostResources>();
  FieldReader reader("beat.resources", *object);
  HostResources resources;
  resources.agent_time_ms = reader.optional_integer("agent_time_ms");
  resources.cpu_percent = read_percent(reader, "cpu_percent");
  resources.memory_used_mb = read_count(reader, "memory_used_mb");
  resources.memory_total_mb = read_count(reader, "memory_total_mb");
  resources.gpu_source = reader.optional_string("gpu_source", 32).value_or("");
  resources.gpu_error = reader.optional_string("gpu_error", 4096);
  std::optional<Error> entry_problem;
  auto each = [&](const char* key, const char* what, auto read_one) {
    const json* items = reader.optional_array(key);
    if (items == nullptr || !reader.ok() || entry_problem) return;
    if (items->size() > kMaxResourceItems) return reader.fail(key, "at most 65536 entries", json(items->size()));
    for (const json& item : *items) {
      FieldReader entry(what, item);
      read_one(entry);
      if (!entry.ok()) {
        entry_problem = entry.error();
        return;
      }
    }
  };
  each("workers", "beat.resources.workers[]", [&](FieldReader& entry) {
    WorkerResources worker;
    worker.gen = static_cast<int>(entry.optional_integer("gen", -1, kIntMax).value_or(-1));
    worker.rank = static_cast<int>(entry.integer("rank", 0, kIntMax));
    worker.pid = entry.optional_integer("pid", 0, kIntMax).value_or(0);
    worker.cpu_percent = read_percent(entry, "cpu_percent").value_or(0);
    worker.rss_mb = read_count(entry, "rss_mb").value_or(0);
    worker.processes = static_cast<int>(entry.optional_integer("processes", 0, kIntMax).value_or(1));
    if (entry.ok()) resources.workers.push_back(worker);
  });
  each("gpus", "beat.resources.gpus[]", [&](FieldReader& entry) {
    GpuResources gpu;
    gpu.index = static_cast<int>(entry.integer("index", 0, kIntMax));
    gpu.utilization_percent = read_percent(entry, "utilization_percent");
    gpu.memory_used_mb = read_count(entry, "memory_used_mb");
    gpu.memory_total_mb = read_count(entry, "memory_total_mb");
    gpu.power_w = entry.optional_number("power_w");
    gpu.temperature_c = entry.optional_integer("temperature_c", -300, 1000);
    gpu.ecc_corrected = read_count(entry, "ecc_corrected");
    gpu.ecc_uncorrected = read_count(entry, "ecc_uncorrected");
    if (entry.ok()) resources.gpus.push_back(gpu);
  });
  each("xids", "beat.resources.xids[]", [&](FieldReader& entry) {
    XidEvent xid;
    xid.gpu = static_cast<int>(entry.integer("gpu", 0, kIntMax));
    xid.xid = entry.integer("xid", 0);
    xid.agent_time_ms = entry.optional_integer("agent_time_ms");
    if (entry.ok()) resources.xids.push_back(xid);
  });
  if (entry_problem) return *entry_problem;
  if (!reader.ok()) return reader.error();
  return std::optional<HostResources>(std::move(resources));
}

// A forwarded worker message: gen, rank and an object "msg" are the agent's part (a problem
// there is the agent's); what is inside msg is the worker's (FromWorker::msg).
FromWorker read_from_worker(FieldReader& reader) {
  FromWorker from;
  from.gen = read_gen(reader);
  from.rank = read_rank(reader);
  from.pid = reader.optional_integer("pid", 0, kIntMax);
  const json* body = reader.object("msg");
  if (body == nullptr || !reader.ok()) return from;
  from.msg = parse_worker_message(*body);
  if (!from.msg) {
    FieldReader request("", *body);
    from.failed_request_id = request.optional_integer("id");
  }
  return from;
}

Result<AgentMessage> parse_beat(FieldReader& reader) {
  AgentBeat beat;
  beat.agent_time_ms = reader.optional_integer("agent_time_ms");
  beat.load1 = reader.optional_number("load1");
  beat.mem_available_mb = reader.optional_integer("mem_available_mb");
  if (const json* workers = reader.optional_array("workers")) {
    for (const json& item : *workers) {
      FieldReader worker("beat.workers[]", item);
      AgentWorkerState state;
      state.gen = static_cast<int>(worker.optional_integer("gen", -1, kIntMax).value_or(-1));
      state.rank = static_cast<int>(worker.optional_integer("rank", -1, kIntMax).value_or(-1));
      state.pid = worker.optional_integer("pid", 0, kIntMax).value_or(0);
      state.alive = worker.optional_boolean("alive").value_or(false);
      state.state = worker.optional_string("state", 8).value_or("");
      if (!worker.ok()) return worker.error();
      beat.workers.push_back(std::move(state));
    }
  }
  if (const json* held = reader.optional_array("worker_beats")) {
    for (const json& item : *held) {
      FieldReader entry("beat.worker_beats[]", item);
      FromWorker from = read_from_worker(entry);
      if (!entry.ok()) return entry.error();
      beat.worker_beats.push_back(std::move(from));
    }
  }
  Result<std::optional<HostResources>> resources = read_resources(reader);
  if (!resources) return resources.error();
  beat.resources = std::move(*resources);
  return checked(reader, std::move(beat));
}

// Each message inside is read by parse_agent_message as if its host had sent it alone; a relay
// gathers only beats and pongs.
Result<AgentMessage> parse_relay_batch(FieldReader& reader) {
  RelayBatchReport batch;
  if (const json* messages = reader.optional_array("messages")) {
    batch.messages.reserve(messages->size());
    for (const json& item : *messages) {
      FieldReader entry("relay_batch.messages[]", item);
      RelayedMessage relayed;
      relayed.host = entry.string("host", kMaxRelayHostBytes);
      const json* message = entry.object("message");
      if (!entry.ok()) return entry.error();
      Result<AgentMessage> parsed = parse_agent_message(*message);
      if (!parsed) return Error::user("relay_batch.messages[] (host " + printable(relayed.host, 64) + "): " + parsed.error().message);
      if (auto* beat = std::get_if<AgentBeat>(&*parsed)) {
        relayed.message = std::move(*beat);
      } else if (auto* pong = std::get_if<Pong>(&*parsed)) {
        relayed.message = *pong;
      } else {
        return Error::user("relay_batch.messages[] (host " + printable(relayed.host, 64) + "): a " + type_of(*parsed) +
                           ", but a batch carries only beats and pongs");
      }
      batch.messages.push_back(std::move(relayed));
    }
  }
  return checked(reader, std::move(batch));
}

Result<AgentMessage> parse_dump(FieldReader& reader) {
  FlightRecorderDump dump;
  dump.id = reader.optional_integer("id");
  dump.gen = static_cast<int>(reader.optional_integer("gen", -1, kIntMax).value_or(-1));
  dump.rank = static_cast<int>(reader.integer("rank", 0, kIntMax));
  dump.pid = reader.optional_integer("pid", 0, kIntMax).value_or(0);
  dump.bytes = reader.optional_integer("bytes", 0).value_or(0);
  // base64 of at most kMaxDumpBytes: 4 characters per 3 bytes, padded.
  dump.data_base64 = reader.optional_string("data", (kMaxDumpBytes + 2) / 3 * 4);
  dump.kept_path = reader.optional_string("kept_path", 4096);
  dump.error = reader.optional_string("error", 4096);
  dump.note = reader.optional_string("note", 8192);
  return checked(reader, std::move(dump));
}

Result<AgentMessage> parse_sample(FieldReader& reader) {
  SampleReply sample;
  sample.id = reader.optional_integer("id");
  sample.gen = static_cast<int>(reader.optional_integer("gen", -1, kIntMax).value_or(-1));
  sample.rank = static_cast<int>(reader.optional_integer("rank", -1, kIntMax).value_or(-1));
  sample.pid = reader.optional_integer("pid", 0, kIntMax).value_or(0);
  // The agent caps the text at kMaxSampleTextBytes plus a note; allow a little over.
  sample.text = reader.optional_string("text", kMaxSampleTextBytes + 4096);
  sample.error = reader.optional_string("error", 4096);
  return checked(reader, std::move(sample));
}

Result<AgentMessage> parse_protocol_error(FieldReader& reader) {
  WorkerProtocolError error;
  if (auto gen = reader.optional_integer("gen", -1, kIntMax)) error.gen = static_cast<int>(*gen);
  if (auto rank = reader.optional_integer("rank", 0, kIntMax)) error.rank = static_cast<int>(*rank);
  error.pid = reader.optional_integer("pid", 0, kIntMax).value_or(0);
  error.error = reader.string("error", 4096);
  error.closed = reader.optional_boolean("closed").value_or(false);
  return checked(reader, std::move(error));
}

}  // namespace

json to_json(const HostResources& resources) {
  json out = json::object();
  put_optional(out, "agent_time_ms", resources.agent_time_ms);
  put_optional(out, "cpu_percent", resources.cpu_percent);
  put_optional(out, "memory_used_mb", resources.memory_used_mb);
  put_optional(out, "memory_total_mb", resources.memory_total_mb);
  json workers = json::array();
  for (const WorkerResources& worker : resources.workers) {
    workers.push_back({{"gen", worker.gen}, {"rank", worker.rank}, {"pid", worker.pid},
                       {"cpu_percent", worker.cpu_percent}, {"rss_mb", worker.rss_mb}, {"processes", worker.processes}});
  }
  out["workers"] = std::move(workers);
  json gpus = json::array();
  for (const GpuResources& gpu : resources.gpus) {
    json entry = {{"index", gpu.index}};
    put_optional(entry, "utilization_percent", gpu.utilization_percent);
    put_optional(entry, "memory_used_mb", gpu.memory_used_mb);
    put_optional(entry, "memory_total_mb", gpu.memory_total_mb);
    put_optional(entry, "power_w", gpu.power_w);
    put_optional(entry, "temperature_c", gpu.temperature_c);
    put_optional(entry, "ecc_corrected", gpu.ecc_corrected);
    put_optional(entry, "ecc_uncorrected", gpu.ecc_uncorrected);
    gpus.push_back(std::move(entry));
  }
  out["gpus"] = std::move(gpus);
  out["gpu_source"] = resources.gpu_source;
  put_optional(out, "gpu_error", resources.gpu_error);
  json xids = json::array();
  for (const XidEvent& xid : resources.xids) {
    json entry = {{"gpu", xid.gpu}, {"xid", xid.xid}};
    put_optional(entry, "agent_time_ms", xid.agent_time_ms);
    xids.push_back(std::move(entry));
  }
  out["xids"] = std::move(xids);
  return out;
}

namespace {

json from_worker_fields(const FromWorker& from) {
  json out = {{"gen", from.gen}, {"rank", from.rank}};
  put_optional(out, "pid", from.pid);
  // An Error here is the supervisor's reading of a bad line: never sent (agent_messages.h).
  out["msg"] = from.msg ? to_json(*from.msg) : json::object();
  return out;
}

struct ToJson {
  json operator()(const AgentHello& m) const {
    json out = {{"type", msg::kHello}, {"protocol", m.protocol}, {"version", m.version}, {"host", m.host},
                {"pid", m.pid}};
    put_optional(out, "agent_time_ms", m.agent_time_ms);
    put_optional(out, "socket", m.socket);
    put_optional(out, "attach_socket", m.attach_socket);
    out["facts"] = m.facts;
    if (m.stack) out["stack"] = to_json(*m.stack);
    return out;
  }
  json operator()(const WorkerStartedReport& m) const {
    json out = {{"type", msg::kStarted}, {"gen", m.gen}, {"rank", m.rank}, {"pid", m.pid}};
    put_optional(out, "local_rank", m.local_rank);
    put_optional(out, "agent_time_ms", m.agent_time_ms);
    if (m.standby) out["standby"] = true;
    return out;
  }
  json operator()(const WorkerSpawnFailedReport& m) const {
    return {{"type", msg::kSpawnFailed}, {"gen", m.gen}, {"rank", m.rank}, {"error", m.error}};
  }
  json operator()(const WorkerExitReport& m) const {
    json out = {{"type", msg::kExit}, {"gen", m.gen}, {"rank", m.rank}, {"pid", m.pid}};
    put_optional(out, "local_rank", m.local_rank);
    if (m.signal) {
      out["signal"] = *m.signal;
      put_optional(out, "signal_name", m.signal_name);
    } else {
      out["code"] = m.code.value_or(-1);
    }
    if (m.core_dumped) out["core_dumped"] = true;
    put_optional(out, "agent_time_ms", m.agent_time_ms);
    out["tail"] = m.tail;
    out["killed_by_agent"] = m.killed_by_agent;
    if (m.error) {
      json error = {{"message", m.error->message}};
      put_optional(error, "type", m.error->type);
      put_optional(error, "traceback", m.error->traceback);
      put_optional(error, "timestamp", m.error->timestamp);
      out["error"] = std::move(error);
    }
    return out;
  }
  json operator()(const WorkerLogLine& m) const {
    return {{"type", msg::kLog}, {"gen", m.gen}, {"rank", m.rank}, {"stream", m.stream}, {"line", m.line}};
  }
  json operator()(const FromWorker& m) const {
    json out = from_worker_fields(m);
    out["type"] = msg::kFromWorker;
    return out;
  }
  json operator()(const AgentBeat& m) const {
    json workers = json::array();
    for (const AgentWorkerState& worker : m.workers) {
      workers.push_back({{"gen", worker.gen}, {"rank", worker.rank}, {"pid", worker.pid}, {"alive", worker.alive},
                         {"state", worker.state}});
    }
    json out = {{"type", msg::kBeat}};
    put_optional(out, "agent_time_ms", m.agent_time_ms);
    out["workers"] = std::move(workers);
    put_optional(out, "load1", m.load1);
    put_optional(out, "mem_available_mb", m.mem_available_mb);
    if (!m.worker_beats.empty()) {
      json held = json::array();
      for (const FromWorker& from : m.worker_beats) held.push_back(from_worker_fields(from));
      out["worker_beats"] = std::move(held);
    }
    if (m.resources) out["resources"] = to_json(*m.resources);
    return out;
  }
  json operator()(const Pong& m) const {
    json out = {{"type", msg::kPong}};
    put_optional(out, "id", m.id);
    put_optional(out, "agent_time_ms", m.agent_time_ms);
    put_optional(out, "supervisor_time_ms", m.supervisor_time_ms);
    return out;
  }
  json operator()(const PortReply& m) const { return {{"type", msg::kPort}, {"id", m.id}, {"port", m.port}}; }
  json operator()(const SampleReply& m) const {
    json out = {{"type", msg::kSample}, {"gen", m.gen}, {"rank", m.rank}, {"pid", m.pid}};
    put_optional(out, "id", m.id);
    put_optional(out, "text", m.text);
    put_optional(out, "error", m.error);
    return out;
  }
  json operator()(const Released& m) const {
    json out = {{"type", msg::kReleased}, {"gen", m.gen}, {"killed", m.killed}, {"remaining", m.remaining},
                {"ms", m.ms}};
    put_optional(out, "ranks", m.ranks);
    if (!m.remaining_pids.empty()) out["remaining_pids"] = m.remaining_pids;
    return out;
  }
  json operator()(const AgentError& m) const {
    json out = {{"type", msg::kError}, {"message", m.message}};
    put_optional(out, "about", m.about);
    put_optional(out, "id", m.id);
    put_optional(out, "gen", m.gen);
    put_optional(out, "rank", m.rank);
    return out;
  }
  json operator()(const AgentBye& m) const {
    return {{"type", msg::kBye}, {"reason", m.reason}, {"killed", m.killed}};
  }
  json operator()(const WorkerProtocolError& m) const {
    json out = {{"type", msg::kProtocolError}, {"pid", m.pid}, {"error", m.error}, {"closed", m.closed}};
    put_optional(out, "gen", m.gen);
    put_optional(out, "rank", m.rank);
    return out;
  }
  json operator()(const FlightRecorderDump& m) const {
    json out = {{"type", msg::kDump}, {"gen", m.gen}, {"rank", m.rank}, {"pid", m.pid}, {"bytes", m.bytes}};
    put_optional(out, "id", m.id);
    put_optional(out, "data", m.data_base64);
    put_optional(out, "kept_path", m.kept_path);
    put_optional(out, "error", m.error);
    put_optional(out, "note", m.note);
    return out;
  }
  json operator()(const HealthReply& m) const {
    return {{"type", msg::kHealth}, {"id", m.id}, {"report", to_json(m.report)}};
  }
  json operator()(const RelayFromReport& m) const { return relay_to_json(m); }
  json operator()(const RelayClosedReport& m) const { return relay_to_json(m); }
  json operator()(const RelayBatchReport& m) const {
    json messages = json::array();
    for (const RelayedMessage& relayed : m.messages) {
      messages.push_back({{"host", relayed.host}, {"message", std::visit(*this, relayed.message)}});
    }
    return {{"type", msg::kRelayBatch}, {"messages", std::move(messages)}};
  }
  json operator()(const ReattachedReport& m) const {
    json workers = json::array();
    for (const ReattachedWorker& worker : m.workers) workers.push_back({{"gen", worker.gen}, {"rank", worker.rank}, {"pid", worker.pid}});
    json exits = json::array();
    for (const WorkerExitReport& exit : m.exits) exits.push_back((*this)(exit));
    return {{"type", msg::kReattached}, {"host", m.host},       {"pid", m.pid},         {"detached_ms", m.detached_ms},
            {"reason", m.reason},       {"workers", std::move(workers)}, {"exits", std::move(exits)}};
  }
  json operator()(const GenChangedReply& m) const {
    json out = {{"type", msg::kGenChanged}, {"from", m.from}, {"to", m.to}, {"ranks", m.ranks}, {"pids", m.pids}};
    put_optional(out, "id", m.id);
    return out;
  }
};

}  // namespace

bool FromWorker::operator==(const FromWorker& other) const {
  if (gen != other.gen || rank != other.rank || pid != other.pid || failed_request_id != other.failed_request_id ||
      msg.ok() != other.msg.ok()) {
    return false;
  }
  return msg ? *msg == *other.msg : msg.error().message == other.msg.error().message;
}

json to_json(const AgentMessage& message) { return std::visit(ToJson{}, message); }

const char* type_of(const AgentMessage& message) {
  static constexpr const char* kNames[] = {msg::kHello,  msg::kStarted,  msg::kSpawnFailed, msg::kExit,
                                           msg::kLog,    msg::kFromWorker, msg::kBeat,      msg::kPong,
                                           msg::kPort,   msg::kSample,   msg::kReleased,    msg::kError,
                                           msg::kBye,    msg::kProtocolError, msg::kDump,   msg::kGenChanged,
                                           msg::kHealth, msg::kRelayFrom, msg::kRelayClosed, msg::kReattached,
                                           msg::kRelayBatch};
  static_assert(std::size(kNames) == std::variant_size_v<AgentMessage>);
  return kNames[message.index()];
}

Result<AgentMessage> parse_agent_message(const json& frame) {
  if (!frame.is_object()) return Error::user(std::string("frame is a JSON ") + frame.type_name() + ", not an object");
  auto type_field = frame.find("type");
  if (type_field == frame.end() || !type_field->is_string()) return Error::user("frame has no string \"type\"");
  const std::string& type = type_field->get_ref<const std::string&>();
  FieldReader reader(type, frame);
  if (type == msg::kHello) return parse_hello(reader);
  if (type == msg::kStarted) {
    WorkerStartedReport started{read_gen(reader), read_rank(reader), read_pid(reader)};
    if (auto local_rank = reader.optional_integer("local_rank", 0, kIntMax)) {
      started.local_rank = static_cast<int>(*local_rank);
    }
    started.agent_time_ms = reader.optional_integer("agent_time_ms");
    started.standby = reader.optional_boolean("standby").value_or(false);
    return checked(reader, std::move(started));
  }
  if (type == msg::kSpawnFailed) {
    WorkerSpawnFailedReport failed{read_gen(reader), read_rank(reader), ""};
    failed.error = reader.optional_string("error", 4096).value_or("unknown error");
    return checked(reader, std::move(failed));
  }
  if (type == msg::kExit) return parse_exit(reader, frame);
  if (type == msg::kLog) {
    WorkerLogLine log{read_gen(reader), read_rank(reader), "", ""};
    log.stream = reader.optional_string("stream", 16).value_or("stdout");
    log.line = reader.string("line", kMaxLogLineBytes);
    return checked(reader, std::move(log));
  }
  if (type == msg::kFromWorker) {
    FromWorker from = read_from_worker(reader);
    return checked(reader, std::move(from));
  }
  if (type == msg::kBeat) return parse_beat(reader);
  if (type == msg::kPong) {
    Pong pong{reader.optional_integer("id"), reader.optional_integer("agent_time_ms"),
              reader.optional_integer("supervisor_time_ms")};
    return checked(reader, std::move(pong));
  }
  if (type == msg::kPort) {
    PortReply port{reader.integer("id"), static_cast<int>(reader.integer("port", 1, 65535))};
    return checked(reader, std::move(port));
  }
  if (type == msg::kSample) return parse_sample(reader);
  if (type == msg::kReleased) {
    Released released;
    released.gen = read_gen(reader);
    released.killed = reader.optional_integer_array("killed", kMaxPids);
    released.remaining = reader.optional_integer("remaining", 0).value_or(0);
    released.ms = reader.optional_integer("ms", 0).value_or(0);
    released.remaining_pids = reader.optional_integer_array("remaining_pids", kMaxPids);
    if (reader.optional_array("ranks")) released.ranks = reader.optional_integer_array("ranks", kMaxPids);
    return checked(reader, std::move(released));
  }
  if (type == msg::kHealth) {
    HealthReply reply;
    reply.id = reader.integer("id");
    if (const json* report = reader.object("report")) {
      Result<HealthReport> parsed = parse_health_report(*report, "health.report");
      if (!parsed) return parsed.error();
      reply.report = std::move(*parsed);
    }
    return checked(reader, std::move(reply));
  }
  if (type == msg::kGenChanged) {
    GenChangedReply reply;
    reply.id = reader.optional_integer("id");
    reply.from = static_cast<int>(reader.integer("from", 0, kIntMax));
    reply.to = static_cast<int>(reader.integer("to", 0, kIntMax));
    reply.ranks = reader.optional_integer_array("ranks", kMaxPids);
    reply.pids = reader.optional_integer_array("pids", kMaxPids);
    return checked(reader, std::move(reply));
  }
  if (type == msg::kError) {
    AgentError error{reader.optional_string("message", 64 << 10).value_or(""), reader.optional_string("about", 64)};
    error.id = reader.optional_integer("id");
    if (auto gen = reader.optional_integer("gen", -1, kIntMax)) error.gen = static_cast<int>(*gen);
    if (auto rank = reader.optional_integer("rank", 0, kIntMax)) error.rank = static_cast<int>(*rank);
    return checked(reader, std::move(error));
  }
  if (type == msg::kBye) {
    AgentBye bye{reader.optional_string("reason", 4096).value_or(""), reader.optional_integer_array("killed", kMaxPids)};
    return checked(reader, std::move(bye));
  }
  if (type == msg::kProtocolError) return parse_protocol_error(reader);
  if (type == msg::kDump) return parse_dump(reader);
  if (type == msg::kRelayFrom) return lift<AgentMessage>(parse_relay_from(reader));
  if (type == msg::kRelayClosed) return lift<AgentMessage>(parse_relay_closed(reader));
  if (type == msg::kReattached) return parse_reattached(reader);
  if (type == msg::kRelayBatch) return parse_relay_batch(reader);
  return Error::user("unknown message type '" + printable(type, 40) + "'");
}

}  // namespace dtrain::proto
