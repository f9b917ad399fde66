#include "launcher/proto/agent_frame_parser.h"

#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <span>

#include <simdjson.h>

#include "launcher/base/base64.h"
#include "launcher/proto/beat_fields.h"
#include "launcher/proto/frame.h"
#include "worker/contract/wire.h"

namespace dtrain::proto {

namespace wire = contract::wire;
using simdjson::dom::element;
using simdjson::dom::element_type;

namespace {

constexpr int64_t kIntMax = std::numeric_limits<int>::max();
constexpr int64_t kNoMin = std::numeric_limits<int64_t>::min();
constexpr int64_t kNoMax = std::numeric_limits<int64_t>::max();

// json_as_integer (launcher/base/json_fields.h) over a simdjson value: simdjson types a whole
// number that fits int64 INT64 and one above INT64_MAX UINT64 (nlohmann's number_unsigned,
// refused there too).
std::optional<int64_t> as_integer(element value) {
  if (value.type() == element_type::INT64) return int64_t(value);
  if (value.type() == element_type::DOUBLE) {
    double number = double(value);
    if (std::isfinite(number) && std::trunc(number) == number && number >= -9.0e18 && number <= 9.0e18) {
      return static_cast<int64_t>(number);
    }
  }
  return std::nullopt;
}

std::optional<double> as_number(element value) {
  switch (value.type()) {
    case element_type::INT64: return static_cast<double>(int64_t(value));
    case element_type::UINT64: return static_cast<double>(uint64_t(value));
    case element_type::DOUBLE: return double(value);
    default: return std::nullopt;
  }
}

// The members of one object that a reader wants, found in one pass over it, and FieldReader's
// checks over them with the same ranges; a null member counts as absent, as there. It only
// decides: the first problem clears ok (the generic path words it). The last of duplicate
// keys wins, as in nlohmann's DOM.
class StrictFields {
 public:
  static constexpr size_t kMaxKeys = 16;

  StrictFields(element value, std::initializer_list<std::string_view> keys)
      : StrictFields(value, std::span<const std::string_view>(keys.begin(), keys.size())) {}
  StrictFields(element value, std::span<const std::string_view> keys) {
    simdjson::dom::object object;
    if (value.get(object) != simdjson::SUCCESS || keys.size() > kMaxKeys) {
      ok = false;
      return;
    }
    for (std::string_view key : keys) keys_[count_++] = key;
    for (simdjson::dom::key_value_pair field : object) {
      for (size_t i = 0; i < count_; ++i) {
        if (field.key == keys_[i]) {
          values_[i] = field.value;
          break;
        }
      }
    }
  }

  std::optional<int64_t> optional_integer(std::string_view key, int64_t min = kNoMin, int64_t max = kNoMax) {
    std::optional<element> value = member(key);
    if (!value) return std::nullopt;
    std::optional<int64_t> number = as_integer(*value);
    if (!number || *number < min || *number > max) return refuse<int64_t>();
    return number;
  }
  int64_t integer(std::string_view key, int64_t min = kNoMin, int64_t max = kNoMax) {
    if (!member(key)) return refuse<int64_t>().value_or(0);
    return optional_integer(key, min, max).value_or(0);
  }
  std::optional<double> optional_number(std::string_view key) {
    std::optional<element> value = member(key);
    if (!value) return std::nullopt;
    std::optional<double> number = as_number(*value);
    if (!number || !std::isfinite(*number)) return refuse<double>();
    return number;
  }
  /// A percentage as agent_messages.cpp's read_percent checks it.
  std::optional<double> optional_percent(std::string_view key) {
    std::optional<double> value = optional_number(key);
    if (value && (*value < 0 || *value > 1e6)) return refuse<double>();
    return value;
  }
  std::optional<std::string_view> optional_string(std::string_view key, size_t max_bytes) {
    std::optional<element> value = member(key);
    if (!value) return std::nullopt;
    std::string_view text;
    if (value->get(text) != simdjson::SUCCESS || text.size() > max_bytes) return refuse<std::string_view>();
    return text;
  }
  std::optional<bool> optional_boolean(std::string_view key) {
    std::optional<element> value = member(key);
    if (!value) return std::nullopt;
    bool flag = false;
    if (value->get(flag) != simdjson::SUCCESS) return refuse<bool>();
    return flag;
  }
  std::optional<simdjson::dom::array> optional_array(std::string_view key, size_t max_items = SIZE_MAX) {
    std::optional<element> value = member(key);
    if (!value) return std::nullopt;
    simdjson::dom::array items;
    if (value->get(items) != simdjson::SUCCESS || items.size() > max_items) return refuse<simdjson::dom::array>();
    return items;
  }
  std::optional<element> optional_object(std::string_view key) {
    std::optional<element> value = member(key);
    if (value && !value->is_object()) return refuse<element>();
    return value;
  }
  std::optional<element> object(std::string_view key) {
    if (!member(key)) return refuse<element>();
    return optional_object(key);
  }

  bool ok = true;

 private:
  std::optional<element> member(std::string_view key) const {
    for (size_t i = 0; i < count_; ++i) {
      if (keys_[i] == key) {
        if (values_[i] && values_[i]->is_null()) return std::nullopt;
        return values_[i];
      }
    }
    return std::nullopt;  // not a key this reader asked for: a bug here, caught by the tests
  }
  template <class T>
  std::optional<T> refuse() {
    ok = false;
    return std::nullopt;
  }

  std::array<std::string_view, kMaxKeys> keys_;
  std::array<std::optional<element>, kMaxKeys> values_;
  size_t count_ = 0;
};

// parse_worker_message's checks for a "beat"; nullopt for any other message or a bad beat.
std::optional<WorkerBeat> read_worker_beat(element message) {
  StrictFields fields(message, kBeatKeys);
  if (fields.optional_string("type", SIZE_MAX) != std::optional<std::string_view>(wire::kBeat)) return std::nullopt;
  WorkerBeat beat;
  beat.step = fields.integer("step", 0);
  read_beat_metrics(fields, beat.metrics);
  if (std::optional<std::string_view> phase = fields.optional_string("phase", 64)) {
    if (*phase == wire::kPhaseTrain) beat.phase = WorkerPhase::train;
    else if (*phase == wire::kPhaseCheckpoint) beat.phase = WorkerPhase::checkpoint;
    else return std::nullopt;
  }
  if (!fields.ok) return std::nullopt;
  return beat;
}

// agent_messages.cpp's read_resources.
bool read_resources(element object, HostResources& resources) {
  StrictFields fields(object, {"agent_time_ms", "cpu_percent", "memory_used_mb", "memory_total_mb", "gpu_source",
                               "gpu_error", "workers", "gpus", "xids"});
  resources.agent_time_ms = fields.optional_integer("agent_time_ms");
  resources.cpu_percent = fields.optional_percent("cpu_percent");
  resources.memory_used_mb = fields.optional_integer("memory_used_mb", 0);
  resources.memory_total_mb = fields.optional_integer("memory_total_mb", 0);
  resources.gpu_source = std::string(fields.optional_string("gpu_source", 32).value_or(""));
  if (auto error = fields.optional_string("gpu_error", 4096)) resources.gpu_error = std::string(*error);
  if (auto workers = fields.optional_array("workers", kMaxResourceItems)) {
    for (element item : *workers) {
      StrictFields entry(item, {"gen", "rank", "pid", "cpu_percent", "rss_mb", "processes"});
      WorkerResources worker;
      worker.gen = static_cast<int>(entry.optional_integer("gen", -1, kIntMax).value_or(-1));
      worker.rank = static_cast<int>(entry.integer("rank", 0, kIntMax));
      worker.pid = entry.optional_integer("pid", 0, kIntMax).value_or(0);
      worker.cpu_percent = entry.optional_percent("cpu_percent").value_or(0);
      worker.rss_mb = entry.optional_integer("rss_mb", 0).value_or(0);
      worker.processes = static_cast<int>(entry.optional_integer("processes", 0, kIntMax).value_or(1));
      if (!entry.ok) return false;
      resources.workers.push_back(worker);
    }
  }
  if (auto gpus = fields.optional_array("gpus", kMaxResourceItems)) {
    for (element item : *gpus) {
      StrictFields entry(item, {"index", "utilization_percent", "memory_used_mb", "memory_total_mb", "power_w",
                                "temperature_c", "ecc_corrected", "ecc_uncorrected"});
      GpuResources gpu;
      gpu.index = static_cast<int>(entry.integer("index", 0, kIntMax));
      gpu.utilization_percent = entry.optional_percent("utilization_percent");
      gpu.memory_used_mb = entry.optional_integer("memory_used_mb", 0);
      gpu.memory_total_mb = entry.optional_integer("memory_total_mb", 0);
      gpu.power_w = entry.optional_number("power_w");
      gpu.temperature_c = entry.optional_integer("temperature_c", -300, 1000);
      gpu.ecc_corrected = entry.optional_integer("ecc_corrected", 0);
      gpu.ecc_uncorrected = entry.optional_integer("ecc_uncorrected", 0);
      if (!entry.ok) return false;
      resources.gpus.push_back(gpu);
    }
  }
  if (auto xids = fields.optional_array("xids", kMaxResourceItems)) {
    for (element item : *xids) {
      StrictFields entry(item, {"gpu", "xid", "agent_time_ms"});
      XidEvent xid;
      xid.gpu = static_cast<int>(entry.integer("gpu", 0, kIntMax));
      xid.xid = entry.integer("xid", 0);
      xid.agent_time_ms = entry.optional_integer("agent_time_ms");
      if (!entry.ok) return false;
      resources.xids.push_back(xid);
    }
  }
  return fields.ok;
}

// agent_messages.cpp's parse_beat, with each held worker beat read as parse_worker_message
// would (anything else in worker_beats goes the generic way, which blames the worker).
std::optional<AgentBeat> read_beat_fields(element root) {
  StrictFields fields(root, {"type", "agent_time_ms", "load1", "mem_available_mb", "workers", "worker_beats",
                             "resources"});
  if (fields.optional_string("type", SIZE_MAX) != std::optional<std::string_view>("beat")) return std::nullopt;
  AgentBeat beat;
  beat.agent_time_ms = fields.optional_integer("agent_time_ms");
  beat.load1 = fields.optional_number("load1");
  beat.mem_available_mb = fields.optional_integer("mem_available_mb");
  if (auto workers = fields.optional_array("workers")) {
    beat.workers.reserve(workers->size());
    for (element item : *workers) {
      StrictFields worker(item, {"gen", "rank", "pid", "alive", "state"});
      AgentWorkerState state;
      state.gen = static_cast<int>(worker.optional_integer("gen", -1, kIntMax).value_or(-1));
      state.rank = static_cast<int>(worker.optional_integer("rank", -1, kIntMax).value_or(-1));
      state.pid = worker.optional_integer("pid", 0, kIntMax).value_or(0);
      state.alive = worker.optional_boolean("alive").value_or(false);
      state.state = std::string(worker.optional_string("state", 8).value_or(""));
      if (!worker.ok) return std::nullopt;
      beat.workers.push_back(std::move(state));
    }
  }
  if (auto held = fields.optional_array("worker_beats")) {
    beat.worker_beats.reserve(held->size());
    for (element item : *held) {
      StrictFields entry(item, {"gen", "rank", "pid", "msg"});
      FromWorker from;
      from.gen = static_cast<int>(entry.integer("gen", -1, kIntMax));
      from.rank = static_cast<int>(entry.integer("rank", 0, kIntMax));
      from.pid = entry.optional_integer("pid", 0, kIntMax);
      std::optional<element> message = entry.object("msg");
      if (!entry.ok) return std::nullopt;
      std::optional<WorkerBeat> worker_beat = read_worker_beat(*message);
      if (!worker_beat) return std::nullopt;
      from.msg = WorkerMessage(*worker_beat);
      beat.worker_beats.push_back(std::move(from));
    }
  }
  if (std::optional<element> object = fields.optional_object("resources")) {
    HostResources resources;
    if (!read_resources(*object, resources)) return std::nullopt;
    beat.resources = std::move(resources);
  }
  if (!fields.ok) return std::nullopt;
  return beat;
}

// relay_messages.cpp's parse_relay_from: a relay carries its hosts' streams in these, so at
// scale most of the bytes the supervisor reads are the base64 text of one (nlohmann's lexer
// took a third of the supervisor loop at 16,384 relayed hosts).
std::optional<RelayFromReport> read_relay_from_fields(element root) {
  StrictFields fields(root, {"type", "host", "data", "diagnostics"});
  if (fields.optional_string("type", SIZE_MAX) != std::optional<std::string_view>("relay_from")) return std::nullopt;
  std::optional<std::string_view> host = fields.optional_string("host", kMaxRelayHostBytes);
  std::optional<std::string_view> data = fields.optional_string("data", kMaxRelayEncodedChunkBytes);
  std::optional<std::string_view> diagnostics = fields.optional_string("diagnostics", kMaxRelayReasonBytes);
  if (!fields.ok || !host) return std::nullopt;
  RelayFromReport from;
  from.host = std::string(*host);
  if (data && !base64_decode(*data, from.data)) return std::nullopt;
  from.diagnostics = std::string(diagnostics.value_or(""));
  return from;
}

// agent_messages.cpp's pong: every host answers each ping, half as many frames as beats.
std::optional<Pong> read_pong_fields(element root) {
  StrictFields fields(root, {"type", "id", "agent_time_ms", "supervisor_time_ms"});
  if (fields.optional_string("type", SIZE_MAX) != std::optional<std::string_view>("pong")) return std::nullopt;
  Pong pong{fields.optional_integer("id"), fields.optional_integer("agent_time_ms"),
            fields.optional_integer("supervisor_time_ms")};
  if (!fields.ok) return std::nullopt;
  return pong;
}

// agent_messages.cpp's parse_relay_batch: a relay's hosts' beats and pongs, each read as if
// its host had sent it alone. Any doubt about one of them and the whole batch goes the generic
// way, which words the error.
std::optional<RelayBatchReport> read_relay_batch_fields(element root) {
  StrictFields fields(root, {"type", "messages"});
  if (fields.optional_string("type", SIZE_MAX) != std::optional<std::string_view>("relay_batch")) return std::nullopt;
  RelayBatchReport batch;
  if (auto messages = fields.optional_array("messages")) {
    batch.messages.reserve(messages->size());
    for (element item : *messages) {
      StrictFields entry(item, {"host", "message"});
      std::optional<std::string_view> host = entry.optional_string("host", kMaxRelayHostBytes);
      std::optional<element> message = entry.object("message");
      if (!entry.ok || !host) return std::nullopt;
      RelayedMessage relayed{std::string(*host), {}};
      if (std::optional<AgentBeat> beat = read_beat_fields(*message)) {
        relayed.message = std::move(*beat);
      } else if (std::optional<Pong> pong = read_pong_fields(*message)) {
        relayed.message = *pong;
      } else {
        return std::nullopt;
      }
      batch.messages.push_back(std::move(relayed));
    }
  }
  if (!fields.ok) return std::nullopt;
  return batch;
}

// Where nlohmann and simdjson may disagree on what a string holds or whether it is valid JSON
// (\u escapes: lone surrogates; control bytes, which JSON forbids raw in strings), the generic
// path decides. The agent's compact JSON has neither in an ordinary beat.
bool has_tricky_text(std::string_view body) {
  // Control bytes: a branch-free test per block of 64, which the compiler vectorises (a byte at a
  // time with an early exit was 5 % of the supervisor's loop on 120 KB relay batches).
  const auto* bytes = reinterpret_cast<const unsigned char*>(body.data());
  size_t at = 0;
  for (; at + 64 <= body.size(); at += 64) {
    unsigned char control = 0;
    for (size_t i = 0; i < 64; ++i) control |= static_cast<unsigned char>(bytes[at + i] < 0x20);
    if (control) return true;
  }
  for (; at < body.size(); ++at) {
    if (bytes[at] < 0x20) return true;
  }
  // \u escapes: backslashes are rare in what agents send.
  for (size_t slash = body.find('\\'); slash != std::string_view::npos; slash = body.find('\\', slash + 1)) {
    if (slash + 1 < body.size() && body[slash + 1] == 'u') return true;
  }
  return false;
}

}  // namespace

struct AgentFrameParser::Simdjson {
  simdjson::dom::parser parser{kMaxFastFrameBytes};
};

AgentFrameParser::AgentFrameParser() : simdjson_(std::make_unique<Simdjson>()) {}
AgentFrameParser::~AgentFrameParser() = default;

namespace {

/// The parsed document, when `body` is one the fast path may read (size, no tricky text).
std::optional<element> fast_root(simdjson::dom::parser& parser, std::string_view body) {
  if (body.size() > kMaxFastFrameBytes || has_tricky_text(body)) return std::nullopt;
  element root;
  // Copies the body into the parser's padded buffer (kept between calls): simdjson reads up to
  // 64 bytes past the end.
  if (parser.parse(body.data(), body.size()).get(root) != simdjson::SUCCESS) return std::nullopt;
  return root;
}

}  // namespace

std::optional<AgentBeat> AgentFrameParser::read_beat(std::string_view body) {
  std::optional<element> root = fast_root(simdjson_->parser, body);
  if (!root) return std::nullopt;
  return read_beat_fields(*root);
}

std::optional<RelayFromReport> AgentFrameParser::read_relay_from(std::string_view body) {
  std::optional<element> root = fast_root(simdjson_->parser, body);
  if (!root) return std::nullopt;
  return read_relay_from_fields(*root);
}

std::optional<RelayBatchReport> AgentFrameParser::read_relay_batch(std::string_view body) {
  std::optional<element> root = fast_root(simdjson_->parser, body);
  if (!root) return std::nullopt;
  return read_relay_batch_fields(*root);
}

std::optional<Pong> AgentFrameParser::read_pong(std::string_view body) {
  std::optional<element> root = fast_root(simdjson_->parser, body);
  if (!root) return std::nullopt;
  return read_pong_fields(*root);
}


Result<AgentMessage> AgentFrameParser::parse(std::string_view body) {
  // Each fast reader is tried only where the compact JSON of its message has this text outside
  // any string (inside one, its quotes would be escaped); a miss only costs time. A relay's batch
  // first: its beats say "type":"beat" too. Its own "type" comes last as nlohmann writes it (keys
  // in order), so the tail tells without scanning 100 KB or more; a batch written otherwise goes
  // the generic way, as anything doubtful does.
  std::optional<AgentMessage> fast;
  auto take = [&](auto read) {
    if (read) fast = AgentMessage(std::move(*read));
  };
  if (body.ends_with(R"("type":"relay_batch"})")) {
    take(read_relay_batch(body));
  } else if (body.find(R"("type":"beat")") != std::string_view::npos) {
    take(read_beat(body));
  } else if (body.find(R"("type":"relay_from")") != std::string_view::npos) {
    take(read_relay_from(body));
  } else if (body.find(R"("type":"pong")") != std::string_view::npos) {
    take(read_pong(body));
  }
  if (fast) {
    ++fast_parses_;
    return std::move(*fast);
  }
  Result<nlohmann::json> frame = parse_frame_body(body);
  if (!frame) return frame.error();
  return parse_agent_message(*frame);
}

}  // namespace dtrain::proto
