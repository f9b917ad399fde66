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
  hello.pid = reader.optional_integer("pid", 0, kIntMax).value_or(0);
  hello.agent_time_ms = reader.optional_integer("agent_time_ms");
  hello.socket = reader.optional_string("socket", 4096);
  if (const json* facts = reader.optional_object("facts")) hello.facts = *facts;
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
  return checked(reader, std::move(exit));
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
  auto put = [](json& into, const char* key, const auto& value) {
    if (value) into[key] = *value;
  };
  put(out, "agent_time_ms", resources.agent_time_ms);
  put(out, "cpu_percent", resources.cpu_percent);
  put(out, "memory_used_mb", resources.memory_used_mb);
  put(out, "memory_total_mb", resources.memory_total_mb);
  json workers = json::array();
  for (const WorkerResources& worker : resources.workers) {
    workers.push_back({{"gen", worker.gen}, {"rank", worker.rank}, {"pid", worker.pid},
                       {"cpu_percent", worker.cpu_percent}, {"rss_mb", worker.rss_mb}, {"processes", worker.processes}});
  }
  out["workers"] = std::move(workers);
  json gpus = json::array();
  for (const GpuResources& gpu : resources.gpus) {
    json entry = {{"index", gpu.index}};
    put(entry, "utilization_percent", gpu.utilization_percent);
    put(entry, "memory_used_mb", gpu.memory_used_mb);
    put(entry, "memory_total_mb", gpu.memory_total_mb);
    put(entry, "power_w", gpu.power_w);
    put(entry, "temperature_c", gpu.temperature_c);
    put(entry, "ecc_corrected", gpu.ecc_corrected);
    put(entry, "ecc_uncorrected", gpu.ecc_uncorrected);
    gpus.push_back(std::move(entry));
  }
  out["gpus"] = std::move(gpus);
  out["gpu_source"] = resources.gpu_source;
  put(out, "gpu_error", resources.gpu_error);
  json xids = json::array();
  for (const XidEvent& xid : resources.xids) {
    json entry = {{"gpu", xid.gpu}, {"xid", xid.xid}};
    put(entry, "agent_time_ms", xid.agent_time_ms);
    xids.push_back(std::move(entry));
  }
  out["xids"] = std::move(xids);
  return out;
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
    return checked(reader, std::move(error));
  }
  if (type == msg::kBye) {
    AgentBye bye{reader.optional_string("reason", 4096).value_or("")};
    return checked(reader, std::move(bye));
  }
  if (type == msg::kProtocolError) return parse_protocol_error(reader);
  if (type == msg::kDump) return parse_dump(reader);
  return Error::user("unknown message type '" + printable(type, 40) + "'");
}

}  // namespace dtrain::proto
