#include "launcher/proto/supervisor_messages.h"

#include <limits>

#include "launcher/base/base64.h"
#include "launcher/base/json_fields.h"
#include "launcher/base/strings.h"
#include "launcher/proto/frame.h"
#include "launcher/proto/messages.h"

namespace dtrain::proto {

using nlohmann::json;

namespace {

constexpr int64_t kIntMax = std::numeric_limits<int>::max();
constexpr int64_t kIntMin = std::numeric_limits<int>::min();
constexpr size_t kMaxArgs = 65'536;
constexpr size_t kMaxEnvVars = 65'536;
constexpr size_t kMaxSpawnWorkers = 65'536;
constexpr size_t kMaxKillRanks = 1'000'000;
constexpr size_t kMaxPathBytes = 4096;
constexpr size_t kMaxTextBytes = 64 << 10;

template <class T>
Result<SupervisorMessage> checked(FieldReader& reader, T message) {
  if (!reader.ok()) return reader.error();
  return SupervisorMessage(std::move(message));
}

int read_int(FieldReader& reader, std::string_view key, int64_t min = kIntMin) {
  return static_cast<int>(reader.integer(key, min, kIntMax));
}

// An optional object of strings (null: none).
EnvVars read_env(FieldReader& reader, std::string_view key) {
  EnvVars env;
  const json* object = reader.optional_object(key);
  if (object == nullptr) return env;
  if (object->size() > kMaxEnvVars) {
    reader.fail_text(key, "more than " + std::to_string(kMaxEnvVars) + " variables");
    return env;
  }
  for (const auto& [name, value] : object->items()) {
    if (!value.is_string()) {
      reader.fail(key, "expected an object of strings, " + printable(name, 40) + " is not", value);
      return {};
    }
    env.emplace(name, value.get<std::string>());
  }
  return env;
}

Result<SupervisorMessage> parse_config(FieldReader& reader) {
  AgentConfig config;
  config.protocol = read_int(reader, "protocol");
  config.run_id = reader.string("run_id", kMaxPathBytes);
  config.host = reader.string("host", kMaxPathBytes);
  config.runtime_dir = reader.string("runtime_dir", kMaxPathBytes);
  config.heartbeat_interval_ms = reader.integer("heartbeat_interval_ms");
  config.heartbeat_timeout_ms = reader.integer("heartbeat_timeout_ms");
  config.supervisor_time_ms = reader.optional_integer("supervisor_time_ms");
  config.batch_beats = reader.optional_boolean("batch_beats").value_or(false);
  config.reattach_ms = reader.optional_integer("reattach_ms", 0, 24LL * 3'600'000);
  if (const json* stack = reader.optional_object("stack")) {
    Result<StackProbeRequest> request = parse_stack_probe_request(*stack);
    if (!request) return request.error();
    config.stack = std::move(*request);
  }
  if (const json* health = reader.optional_object("health")) {
    Result<HealthRequest> request = parse_health_request(*health, "config.health");
    if (!request) return request.error();
    config.health = std::move(*request);
  }
  return checked(reader, std::move(config));
}

Result<SupervisorMessage> parse_spawn(FieldReader& reader, const json& frame) {
  SpawnRequest spawn;
  spawn.gen = read_int(reader, "gen");
  spawn.workdir = reader.optional_string("workdir", kMaxPathBytes);
  spawn.instrument = reader.optional_boolean("instrument").value_or(false);
  spawn.log_tail_lines = reader.optional_integer("log_tail_lines");
  spawn.argv = reader.string_array("argv", kMaxArgs, FieldReader::kDefaultMaxStringBytes);
  if (reader.ok() && spawn.argv.empty()) reader.fail("argv", "expected a non-empty array of strings", *json_member(frame, "argv"));
  spawn.env = read_env(reader, "env");
  if (auto standby = reader.optional_integer("standby")) {
    if (*standby < 0 || *standby > kMaxStandbys) {
      reader.fail_text("standby", "must be 0 to " + std::to_string(kMaxStandbys) + ", got " + std::to_string(*standby));
    }
    spawn.standby = static_cast<int>(*standby);
  }
  spawn.standby_bootstrap = reader.optional_string_array("standby_bootstrap", kMaxStandbyImports, 200);
  const json* workers = reader.optional_array("workers");
  if (workers == nullptr && reader.ok()) reader.fail_text("workers", "missing (expected an array of {rank, local_rank, env})");
  if (!reader.ok()) return reader.error();
  if (workers->size() > kMaxSpawnWorkers) {
    reader.fail_text("workers", "more than " + std::to_string(kMaxSpawnWorkers) + " workers");
    return reader.error();
  }
  for (const json& item : *workers) {
    FieldReader entry("spawn.workers[]", item);
    SpawnWorker worker;
    worker.rank = read_int(entry, "rank", 0);
    worker.local_rank = read_int(entry, "local_rank", 0);
    worker.env = read_env(entry, "env");
    if (!entry.ok()) return entry.error();
    spawn.workers.push_back(std::move(worker));
  }
  return SupervisorMessage(std::move(spawn));
}

Result<SupervisorMessage> parse_kill(FieldReader& reader) {
  KillRequest kill;
  kill.gen = read_int(reader, "gen", -1);
  std::string signal = reader.string("signal", 16);
  if (reader.ok()) {
    if (signal == "TERM") kill.signal = KillSignal::term;
    else if (signal == "KILL") kill.signal = KillSignal::kill;
    else reader.fail_text("signal", "expected \"TERM\" or \"KILL\", got \"" + printable(signal, 16) + "\"");
  }
  kill.grace_ms = reader.optional_integer("grace_ms").value_or(0);
  if (const json* ranks = reader.optional_value("ranks")) {
    bool ok = ranks->is_array() && !ranks->empty() && ranks->size() <= kMaxKillRanks;
    std::vector<int> given;
    for (const json& item : ok ? *ranks : json::array()) {
      std::optional<int64_t> rank = json_as_integer(item);
      ok = rank && *rank >= 0 && *rank <= kIntMax;
      if (!ok) break;
      given.push_back(static_cast<int>(*rank));
    }
    if (ok) kill.ranks = std::move(given);
    else reader.fail("ranks", "expected a non-empty array of integers", *ranks);
  }
  return checked(reader, std::move(kill));
}

Result<SupervisorMessage> parse_gen_changed(FieldReader& reader) {
  GenChangedRequest change;
  change.id = reader.integer("id");
  change.from = read_int(reader, "from", -1);
  change.to = read_int(reader, "to", -1);
  if (reader.ok() && change.to <= change.from) {
    reader.fail_text("", "'to' must be greater than 'from', got from " + std::to_string(change.from) + " to " +
                             std::to_string(change.to));
  }
  return checked(reader, std::move(change));
}

json env_json(const EnvVars& env) {
  json out = json::object();
  for (const auto& [name, value] : env) out[name] = value;
  return out;
}

struct ToJson {
  json operator()(const AgentConfig& m) const {
    json out = {{"type", msg::kConfig},
                {"protocol", m.protocol},
                {"run_id", m.run_id},
                {"host", m.host},
                {"runtime_dir", m.runtime_dir},
                {"heartbeat_interval_ms", m.heartbeat_interval_ms},
                {"heartbeat_timeout_ms", m.heartbeat_timeout_ms}};
    put_optional(out, "supervisor_time_ms", m.supervisor_time_ms);
    out["batch_beats"] = m.batch_beats;
    put_optional(out, "reattach_ms", m.reattach_ms);
    if (m.stack) out["stack"] = to_json(*m.stack);
    if (m.health) out["health"] = to_json(*m.health);
    return out;
  }
  json operator()(const SpawnRequest& m) const {
    json workers = json::array();
    for (const SpawnWorker& worker : m.workers) {
      workers.push_back({{"rank", worker.rank}, {"local_rank", worker.local_rank}, {"env", env_json(worker.env)}});
    }
    json out = {{"type", msg::kSpawn}, {"gen", m.gen}, {"argv", m.argv}};
    if (m.workdir) out["workdir"] = *m.workdir;
    out["env"] = env_json(m.env);
    out["workers"] = std::move(workers);
    put_optional(out, "log_tail_lines", m.log_tail_lines);
    out["instrument"] = m.instrument;
    if (m.standby) out["standby"] = *m.standby;
    if (m.standby_bootstrap) out["standby_bootstrap"] = *m.standby_bootstrap;
    return out;
  }
  json operator()(const KillRequest& m) const {
    json out = {{"type", msg::kKill}, {"gen", m.gen}, {"signal", to_string(m.signal)}, {"grace_ms", m.grace_ms}};
    if (m.ranks) out["ranks"] = *m.ranks;
    return out;
  }
  json operator()(const PingRequest& m) const {
    json out = {{"type", msg::kPing}};
    put_optional(out, "id", m.id);
    put_optional(out, "supervisor_time_ms", m.supervisor_time_ms);
    return out;
  }
  json operator()(const ToWorkerRequest& m) const {
    return {{"type", msg::kToWorker}, {"gen", m.gen}, {"rank", m.rank}, {"msg", m.msg}};
  }
  json operator()(const ReservePortRequest& m) const {
    json out = {{"type", msg::kReservePort}};
    put_optional(out, "id", m.id);
    return out;
  }
  json operator()(const FenceRequest& m) const {
    json out = {{"type", msg::kFence}};
    if (m.reason) out["reason"] = *m.reason;
    return out;
  }
  json operator()(const SampleRequest& m) const {
    json out = {{"type", msg::kSample}};
    put_optional(out, "id", m.id);
    out.update({{"gen", m.gen}, {"rank", m.rank}, {"pid", m.pid}, {"timeout_ms", m.timeout_ms}});
    return out;
  }
  json operator()(const DumpRequest& m) const {
    json out = {{"type", msg::kDump}};
    put_optional(out, "id", m.id);
    out.update({{"gen", m.gen}, {"timeout_ms", m.timeout_ms}});
    return out;
  }
  json operator()(const GenChangedRequest& m) const {
    return {{"type", msg::kGenChanged}, {"id", m.id}, {"from", m.from}, {"to", m.to}};
  }
  json operator()(const HealthCheckRequest& m) const {
    return {{"type", msg::kHealth}, {"id", m.id}, {"moment", m.moment}, {"diagnose", m.diagnose}};
  }
  json operator()(const RelayOpenRequest& m) const { return relay_to_json(m); }
  json operator()(const RelayToRequest& m) const { return relay_to_json(m); }
  json operator()(const RelayCloseRequest& m) const { return relay_to_json(m); }
  json operator()(const RelayFanoutRequest& m) const { return relay_to_json(m); }
  json operator()(const AgentAttachRequest& m) const { return {{"type", msg::kAttach}, {"socket", m.socket}}; }
};

}  // namespace

const char* to_string(KillSignal signal) { return signal == KillSignal::kill ? "KILL" : "TERM"; }

json to_json(const SupervisorMessage& message) { return std::visit(ToJson{}, message); }

Result<std::string> encode_supervisor_frame(const SupervisorMessage& message) {
  const auto* relay_to = std::get_if<RelayToRequest>(&message);
  if (relay_to == nullptr) return encode_frame_checked(to_json(message));
  // nlohmann's compact dump: keys in order (data, host, type); base64 needs no escaping, the host
  // is escaped as dump() escapes it.
  std::string host = json(relay_to->host).dump(-1, ' ', false, json::error_handler_t::replace);
  std::string body;
  body.reserve(relay_to->data.size() / 3 * 4 + host.size() + 48);
  body += R"({"data":")";
  body += base64_encode(relay_to->data);
  body += R"(","host":)";
  body += host;
  body += R"(,"type":")";
  body += msg::kRelayTo;
  body += R"("})";
  if (body.size() > kMaxFrameBytes) return encode_frame_checked(to_json(message));  // its Error
  return frame_of_body(body);
}

const char* type_of(const SupervisorMessage& message) {
  static constexpr const char* kNames[] = {msg::kConfig, msg::kSpawn,       msg::kKill,  msg::kPing,
                                           msg::kToWorker, msg::kReservePort, msg::kFence, msg::kSample,
                                           msg::kDump,   msg::kGenChanged, msg::kHealth, msg::kRelayOpen,
                                           msg::kRelayTo, msg::kRelayClose, msg::kAttach, msg::kRelayFanout};
  static_assert(std::size(kNames) == std::variant_size_v<SupervisorMessage>);
  return kNames[message.index()];
}

Result<SupervisorMessage> parse_supervisor_message(const json& frame) {
  if (!frame.is_object()) return Error::user(std::string("frame is a JSON ") + frame.type_name() + ", not an object");
  auto type_field = frame.find("type");
  if (type_field == frame.end() || !type_field->is_string()) return Error::user("frame has no string \"type\"");
  const std::string& type = type_field->get_ref<const std::string&>();
  FieldReader reader(type, frame);
  if (type == msg::kConfig) return parse_config(reader);
  if (type == msg::kSpawn) return parse_spawn(reader, frame);
  if (type == msg::kKill) return parse_kill(reader);
  if (type == msg::kPing) {
    PingRequest ping{reader.optional_integer("id"), reader.optional_integer("supervisor_time_ms")};
    return checked(reader, std::move(ping));
  }
  if (type == msg::kToWorker) {
    ToWorkerRequest to_worker;
    to_worker.gen = read_int(reader, "gen", -1);
    to_worker.rank = read_int(reader, "rank", 0);
    if (const json* body = reader.object("msg")) to_worker.msg = *body;
    return checked(reader, std::move(to_worker));
  }
  if (type == msg::kReservePort) {
    ReservePortRequest reserve{reader.optional_integer("id")};
    return checked(reader, std::move(reserve));
  }
  if (type == msg::kFence) {
    FenceRequest fence{reader.optional_string("reason", kMaxTextBytes)};
    return checked(reader, std::move(fence));
  }
  if (type == msg::kSample) {
    SampleRequest sample;
    sample.id = reader.optional_integer("id");
    sample.gen = read_int(reader, "gen", -1);
    sample.rank = read_int(reader, "rank", 0);
    sample.pid = reader.integer("pid");
    sample.timeout_ms = reader.integer("timeout_ms");
    return checked(reader, std::move(sample));
  }
  if (type == msg::kDump) {
    DumpRequest dump;
    dump.id = reader.optional_integer("id");
    dump.gen = read_int(reader, "gen", -1);
    dump.timeout_ms = reader.integer("timeout_ms");
    return checked(reader, std::move(dump));
  }
  if (type == msg::kGenChanged) return parse_gen_changed(reader);
  if (type == msg::kHealth) {
    HealthCheckRequest health;
    health.id = reader.integer("id");
    health.moment = reader.string("moment", 32);
    health.diagnose = reader.optional_boolean("diagnose").value_or(false);
    return checked(reader, std::move(health));
  }
  if (type == msg::kRelayOpen) return lift<SupervisorMessage>(parse_relay_open(reader));
  if (type == msg::kRelayTo) return lift<SupervisorMessage>(parse_relay_to(reader));
  if (type == msg::kRelayFanout) return lift<SupervisorMessage>(parse_relay_fanout(reader));
  if (type == msg::kRelayClose) return lift<SupervisorMessage>(parse_relay_close(reader));
  if (type == msg::kAttach) {
    AgentAttachRequest attach{reader.string("socket", kMaxPathBytes)};
    if (reader.ok() && (attach.socket.empty() || attach.socket.front() != '/')) {
      reader.fail_text("socket", "expected an absolute path");
    }
    return checked(reader, std::move(attach));
  }
  return Error::user("unknown message type '" + printable(type, 40) + "'");
}

}  // namespace dtrain::proto
