// The typed parsers of what workers and agents send (proto/worker_messages.h,
// proto/agent_messages.h): every field of every message, wrongly typed, is an error that names
// the message and the field — never an exception — and a valid message round-trips.

#include <doctest/doctest.h>

#include <algorithm>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fuzz/message_invariants.h"
#include "launcher/base/base64.h"
#include "launcher/proto/agent_frame_parser.h"
#include "launcher/proto/agent_messages.h"
#include "launcher/proto/frame.h"
#include "launcher/proto/supervisor_messages.h"
#include "launcher/proto/worker_messages.h"

using namespace dtrain;
using namespace dtrain::proto;
using nlohmann::json;

namespace {

/// A valid example of every worker → agent message.
std::vector<json> valid_worker_messages() {
  return {
      {{"type", "hello"}, {"rank", 3}, {"gen", 1}, {"pid", 4242}},
      {{"type", "beat"}, {"step", 17}, {"loss", 0.5}, {"step_ms", 12.5}, {"comm_ms", 1.25}, {"data_ms", 2.5},
       {"samples", 64}, {"phase", "checkpoint"}},
      {{"type", "kv.set"}, {"id", 1}, {"key", "gloo/0"}, {"value", "abcd"}},
      {{"type", "kv.get"}, {"id", 2}, {"key", "gloo/0"}},
      {{"type", "kv.wait"}, {"id", 3}, {"keys", {"a", "b"}}, {"timeout_ms", 1000}},
      {{"type", "kv.add"}, {"id", 4}, {"key", "count"}, {"delta", -2}},
      {{"type", "gen.check"}, {"id", 5}},
      {{"type", "comm.ready"}, {"ms", 80.5}},
      {{"type", "ckpt.committed"}, {"step", 20}, {"bytes", 1024}, {"ms", 3.5}},
      {{"type", "ckpt.rejected"}, {"step", 20}, {"reason", "CRC mismatch"}},
      {{"type", "bye"}, {"reason", "finished"}},
  };
}

/// Values of the wrong type for any field: each must be refused wherever the field is typed.
std::vector<json> wrong_values_for(const json& good) {
  std::vector<json> wrong = {json::array({1}), json::object({{"x", 1}}), true};
  if (!good.is_string()) wrong.push_back("12");
  if (good.is_number_integer()) {
    wrong.push_back(1.5);
    wrong.push_back(9.9e30);
  }
  wrong.push_back(nullptr);  // refused where the field is required; absent where it is optional
  if (good.is_array()) wrong.push_back(json::array({json::array()}));
  return wrong;
}

/// Fields whose null means "absent" (optional ones); a null there is accepted.
bool optional_field(const std::string& type, const std::string& key) {
  static const std::vector<std::string> optional = {
      "hello.pid", "beat.loss", "beat.step_ms", "beat.comm_ms", "beat.data_ms", "beat.samples", "beat.phase",
      "kv.wait.timeout_ms", "comm.ready.ms", "ckpt.committed.bytes", "ckpt.committed.ms",
      "ckpt.rejected.reason", "bye.reason"};
  return std::find(optional.begin(), optional.end(), type + "." + key) != optional.end();
}

}  // namespace

TEST_CASE("every valid worker message parses and round-trips through to_json") {
  for (const json& message : valid_worker_messages()) {
    CAPTURE(message.dump());
    Result<WorkerMessage> parsed = parse_worker_message(message);
    REQUIRE(parsed.ok());
    CHECK(std::string(type_of(*parsed)) == message["type"].get<std::string>());
    Result<WorkerMessage> again = parse_worker_message(to_json(*parsed));
    REQUIRE(again.ok());
    CHECK(to_json(*again) == to_json(*parsed));
  }
}

TEST_CASE("every field of every worker message, wrongly typed, is an error naming message and field") {
  int cases = 0;
  for (const json& good : valid_worker_messages()) {
    const std::string type = good["type"];
    for (const auto& [key, value] : good.items()) {
      if (key == "type") continue;
      for (const json& wrong : wrong_values_for(value)) {
        if (wrong.is_null() && optional_field(type, key)) continue;
        json bad = good;
        bad[key] = wrong;
        CAPTURE(bad.dump());
        Result<WorkerMessage> parsed = parse_worker_message(bad);
        REQUIRE_FALSE(parsed.ok());
        CHECK(parsed.error().message.rfind(type + "." + key + ":", 0) == 0);
        ++cases;
      }
    }
  }
  CHECK(cases > 60);
}

TEST_CASE("a required worker field that is missing is an error — optional ones may be absent") {
  Result<WorkerMessage> no_step = parse_worker_message({{"type", "beat"}});
  REQUIRE_FALSE(no_step.ok());
  CHECK(no_step.error().message == "beat.step: missing (expected an integer)");
  CHECK(parse_worker_message({{"type", "beat"}, {"step", 3}}).ok());
  CHECK(parse_worker_message({{"type", "beat"}, {"step", 3}, {"loss", nullptr}}).ok());  // a NaN loss, as C++ dumps it
  CHECK(parse_worker_message({{"type", "bye"}}).ok());
  CHECK_FALSE(parse_worker_message({{"type", "kv.get"}, {"key", "k"}}).ok());  // a request needs its id
}

TEST_CASE("a beat's phase is train or checkpoint — anything else is refused with the field named") {
  Result<WorkerMessage> saving = parse_worker_line(R"({"type":"beat","step":4,"phase":"checkpoint"})");
  REQUIRE(saving.ok());
  CHECK(std::get<WorkerBeat>(*saving).phase == WorkerPhase::checkpoint);
  Result<WorkerMessage> training = parse_worker_line(R"({"type":"beat","step":4,"phase":"train"})");
  REQUIRE(training.ok());
  CHECK(std::get<WorkerBeat>(*training).phase == WorkerPhase::train);
  CHECK_FALSE(std::get<WorkerBeat>(*parse_worker_line(R"({"type":"beat","step":4})")).phase);
  Result<WorkerMessage> unknown = parse_worker_line(R"({"type":"beat","step":4,"phase":"eval"})");
  REQUIRE_FALSE(unknown.ok());
  CHECK(unknown.error().message.rfind("beat.phase: expected \"train\" or \"checkpoint\"", 0) == 0);
}

TEST_CASE("the exact null beat of the bug report is an error, not an exception") {
  Result<WorkerMessage> parsed = parse_worker_line(R"({"type":"beat","step":null})");
  REQUIRE_FALSE(parsed.ok());
  CHECK(parsed.error().message == "beat.step: expected an integer, got null");
}

TEST_CASE("lines that are not messages say why, with control bytes escaped") {
  CHECK(parse_worker_line("not json").error().message == "malformed JSON line 'not json'");
  CHECK(parse_worker_line(std::string("{\"a\":\0", 6)).error().message.find("\\x00") != std::string::npos);
  CHECK(parse_worker_line("[1]").error().message == "line is a JSON array, not an object with a \"type\"");
  CHECK(parse_worker_line(R"({"step":1})").error().message == "line has no string \"type\"");
  CHECK(parse_worker_line(R"({"type":7})").error().message == "line has no string \"type\", got 7");
  std::string unknown = parse_worker_line("{\"type\":\"bea\\u001bt\"}").error().message;
  CHECK(unknown.rfind("unknown message type 'bea\\x1bt'", 0) == 0);
  CHECK(parse_worker_line(R"({"type":"beat","step":-1})").error().message.find("out of range") !=
        std::string::npos);
  CHECK(parse_worker_line(R"({"type":"kv.wait","id":1,"keys":[]})").error().message ==
        "kv.wait.keys: expected at least one key");
  CHECK(parse_worker_line(R"({"type":"beat","step":1e3})").ok());  // a whole-valued float is an integer
  CHECK_FALSE(parse_worker_line(R"({"type":"beat","step":18446744073709551615})").ok());
}

TEST_CASE("what the agent reads of a line that is no message: a standby's hello, a refused request's id") {
  CHECK(is_standby_hello(R"({"type":"hello","standby":true,"pid":7})"));
  CHECK_FALSE(parse_worker_line(R"({"type":"hello","standby":true,"pid":7})").ok());  // no rank, no gen
  CHECK_FALSE(is_standby_hello(R"({"type":"hello","standby":false,"pid":7})"));
  CHECK_FALSE(is_standby_hello(R"({"type":"hello","rank":0,"gen":0})"));
  CHECK_FALSE(is_standby_hello(R"({"type":"beat","standby":true})"));
  CHECK_FALSE(is_standby_hello("not json"));
  CHECK(request_id_of(R"({"type":"kv.get","id":12})") == 12);
  CHECK(request_id_of(R"({"type":"kv.get","id":-3,"key":5})") == -3);
  CHECK_FALSE(request_id_of(R"({"type":"kv.get","id":"12"})"));
  CHECK_FALSE(request_id_of(R"({"type":"kv.get","id":1.5})"));
  CHECK_FALSE(request_id_of(R"({"type":"kv.get","id":18446744073709551615})"));
  CHECK_FALSE(request_id_of(R"({"type":"kv.get"})"));
  CHECK_FALSE(request_id_of("[12]"));
  CHECK_FALSE(request_id_of("{\"id\":"));
}

TEST_CASE("a key or a value over its limit is refused") {
  std::string long_key(kMaxWorkerKeyBytes + 1, 'k');
  Result<WorkerMessage> parsed = parse_worker_message({{"type", "kv.get"}, {"id", 1}, {"key", long_key}});
  REQUIRE_FALSE(parsed.ok());
  CHECK(parsed.error().message.find("kv.get.key: string of 513 bytes exceeds the 512-byte limit") == 0);
}

namespace {

std::vector<json> valid_agent_messages() {
  return {
      {{"type", "hello"}, {"protocol", 1}, {"version", "0.1"}, {"pid", 10}, {"agent_time_ms", 5},
       {"socket", "/tmp/s"}, {"facts", {{"cpus", 2}}}},
      {{"type", "started"}, {"gen", 0}, {"rank", 1}, {"pid", 20}},
      {{"type", "spawn_failed"}, {"gen", 0}, {"rank", 1}, {"error", "no such file"}},
      {{"type", "exit"}, {"gen", 0}, {"rank", 1}, {"pid", 20}, {"code", 3}, {"agent_time_ms", 7},
       {"tail", {"a", "b"}}, {"killed_by_agent", false}},
      {{"type", "log"}, {"gen", 0}, {"rank", 1}, {"stream", "stdout"}, {"line", "hi"}},
      {{"type", "from_worker"}, {"gen", 0}, {"rank", 1}, {"pid", 20}, {"msg", {{"type", "beat"}, {"step", 1}}}},
      {{"type", "beat"}, {"agent_time_ms", 9}, {"workers", json::array()}, {"load1", 0.5}, {"mem_available_mb", 100},
       {"worker_beats", {{{"gen", 0}, {"rank", 1}, {"pid", 20}, {"msg", {{"type", "beat"}, {"step", 2}}}}}}},
      {{"type", "pong"}, {"id", 1}, {"agent_time_ms", 2}, {"supervisor_time_ms", 3}},
      {{"type", "port"}, {"id", 1}, {"port", 29500}},
      {{"type", "sample"}, {"id", 1}, {"gen", 0}, {"rank", 1}, {"pid", 20}, {"text", "stack"}},
      {{"type", "released"}, {"gen", 0}, {"killed", {20, 21}}, {"remaining", 0}, {"ms", 12}},
      {{"type", "error"}, {"message", "nope"}, {"about", "config"}},
      {{"type", "bye"}, {"reason", "fence"}},
      {{"type", "protocol_error"}, {"gen", 0}, {"rank", 1}, {"pid", 20}, {"error", "beat.step: ..."},
       {"closed", false}},
  };
}

}  // namespace

TEST_CASE("every valid agent message parses") {
  for (const json& message : valid_agent_messages()) {
    CAPTURE(message.dump());
    CHECK(parse_agent_message(message).ok());
  }
}

TEST_CASE("an agent beat's held worker beats parse as from_worker entries, a bad entry names its field") {
  Result<AgentMessage> parsed = parse_agent_message(valid_agent_messages()[6]);
  REQUIRE(parsed.ok());
  const AgentBeat& beat = std::get<AgentBeat>(*parsed);
  REQUIRE(beat.worker_beats.size() == 1);
  CHECK(beat.worker_beats[0].rank == 1);
  CHECK(beat.worker_beats[0].pid == 20);
  REQUIRE(beat.worker_beats[0].msg.ok());
  CHECK(std::get<WorkerBeat>(*beat.worker_beats[0].msg).step == 2);
  json bad = valid_agent_messages()[6];
  bad["worker_beats"][0]["rank"] = "one";
  Result<AgentMessage> refused = parse_agent_message(bad);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.error().message.rfind("beat.worker_beats[].rank:", 0) == 0);
  bad["worker_beats"] = json::array({json::array()});
  CHECK_FALSE(parse_agent_message(bad).ok());
}

TEST_CASE("every field of every agent message, wrongly typed, is an error naming message and field") {
  int cases = 0;
  for (const json& good : valid_agent_messages()) {
    const std::string type = good["type"];
    for (const auto& [key, value] : good.items()) {
      if (key == "type") continue;
      // A wrong value must never throw; where the field is typed it must be named.
      for (const json& wrong : {json(nullptr), json("x"), json::array({1}), json::object({{"x", 1}}), json(1.5)}) {
        if (wrong.type() == value.type()) continue;
        json bad = good;
        bad[key] = wrong;
        CAPTURE(bad.dump());
        Result<AgentMessage> parsed = parse_agent_message(bad);
        if (!parsed.ok()) {
          CHECK(parsed.error().message.rfind(type + "." + key + ":", 0) == 0);
          ++cases;
        }
      }
    }
  }
  CHECK(cases > 80);
}

TEST_CASE("an exit without a code or a signal, and a worker beat entry of the wrong type, are refused") {
  Result<AgentMessage> no_code = parse_agent_message({{"type", "exit"}, {"gen", 0}, {"rank", 1}, {"pid", 2}});
  REQUIRE_FALSE(no_code.ok());
  CHECK(no_code.error().message.rfind("exit.code:", 0) == 0);
  Result<AgentMessage> bad_worker =
      parse_agent_message({{"type", "beat"}, {"workers", {{{"rank", "zero"}}}}});
  REQUIRE_FALSE(bad_worker.ok());
  CHECK(bad_worker.error().message.rfind("beat.workers[].rank:", 0) == 0);
  Result<AgentMessage> signalled =
      parse_agent_message({{"type", "exit"}, {"gen", 0}, {"rank", 1}, {"pid", 2}, {"signal", 9}, {"signal_name", "SIGKILL"}});
  REQUIRE(signalled.ok());
  CHECK(std::get<WorkerExitReport>(*signalled).signal == 9);
  CHECK_FALSE(std::get<WorkerExitReport>(*signalled).code.has_value());
}

// ---- the beat fast path (AgentFrameParser) against the generic path ---------------------------

namespace {

/// What the generic path makes of a frame body: the decoder's checks, then parse_agent_message.
Result<AgentMessage> parse_generically(std::string_view body) {
  Result<json> frame = parse_frame_body(body);
  if (!frame) return frame.error();
  return parse_agent_message(*frame);
}

/// Every field of a parsed message, comparable: the fuzz target's description (beats and
/// forwarded worker messages in full), so both compare the two paths alike.
std::string describe(const Result<AgentMessage>& parsed) { return fuzz::describe_agent_message(parsed); }

/// A beat as a busy agent sends it: a stopped worker, held beats of every shape, resources.
json full_agent_beat() {
  return {{"type", "beat"},
          {"agent_time_ms", 1700000000123},
          {"workers", {{{"gen", 2}, {"rank", 5}, {"pid", 4242}, {"alive", true}, {"state", "T"}}}},
          {"load1", 3.25},
          {"mem_available_mb", 123456},
          {"worker_beats",
           {{{"gen", 2}, {"rank", 4}, {"pid", 4241},
             {"msg", {{"type", "beat"}, {"step", 17}, {"loss", 0.5}, {"step_ms", 12.5}, {"comm_ms", 1.25},
                      {"data_ms", 2.5}, {"samples", 64}, {"phase", "checkpoint"}}}},
            {{"gen", 2}, {"rank", 6}, {"msg", {{"type", "beat"}, {"step", 1e3}, {"phase", "train"}}}}}},
          {"resources",
           {{"agent_time_ms", 1700000000100},
            {"cpu_percent", 41.5},
            {"memory_used_mb", 2048},
            {"memory_total_mb", 65536},
            {"workers", {{{"gen", 2}, {"rank", 4}, {"pid", 4241}, {"cpu_percent", 250.5}, {"rss_mb", 900},
                          {"processes", 3}}}},
            {"gpus", {{{"index", 0}, {"utilization_percent", 99.5}, {"memory_used_mb", 70000},
                       {"memory_total_mb", 81920}, {"power_w", 350.25}, {"temperature_c", 71},
                       {"ecc_corrected", 1}, {"ecc_uncorrected", 0}}}},
            {"gpu_source", "nvml"},
            {"gpu_error", "none"},
            {"xids", {{{"gpu", 0}, {"xid", 79}, {"agent_time_ms", 1700000000050}}}}}}};
}

/// Calls `visit` with a copy of `root` in which one value (at any depth) is replaced by
/// `replacement`, or, when `replacement` is nullopt, one object member is removed.
void each_variant(const json& root, const std::optional<json>& replacement, const std::function<void(const json&)>& visit) {
  std::function<void(json&, json&)> walk = [&](json& whole, json& node) {
    if (node.is_object()) {
      std::vector<std::string> keys;
      for (const auto& member : node.items()) keys.push_back(member.key());
      for (const std::string& key : keys) {
        json saved = node[key];
        if (replacement) {
          node[key] = *replacement;
        } else {
          node.erase(key);
        }
        visit(whole);
        node[key] = saved;
        walk(whole, node[key]);
      }
    } else if (node.is_array()) {
      for (json& item : node) {
        if (replacement) {
          json saved = item;
          item = *replacement;
          visit(whole);
          item = saved;
        }
        walk(whole, item);
      }
    }
  };
  json copy = root;
  walk(copy, copy);
}

}  // namespace

TEST_CASE("a beat reads the same on the fast path as through nlohmann's DOM, field for field") {
  AgentFrameParser parser;
  for (const json& beat : {full_agent_beat(), valid_agent_messages()[6], json{{"type", "beat"}}}) {
    std::string body = beat.dump();
    CAPTURE(body);
    std::optional<AgentBeat> fast = parser.read_beat(body);
    REQUIRE(fast.has_value());  // these take the fast path
    Result<AgentMessage> generic = parse_generically(body);
    REQUIRE(generic.ok());
    CHECK(describe(AgentMessage(*fast)) == describe(generic));
    CHECK(describe(parser.parse(body)) == describe(generic));
  }
  // The full beat's values, to be sure the comparison compares something.
  AgentBeat beat = *parser.read_beat(full_agent_beat().dump());
  CHECK(beat.agent_time_ms == 1700000000123);
  REQUIRE(beat.workers.size() == 1);
  CHECK(beat.workers[0].state == "T");
  REQUIRE(beat.worker_beats.size() == 2);
  CHECK(std::get<WorkerBeat>(*beat.worker_beats[1].msg).step == 1000);
  CHECK_FALSE(beat.worker_beats[1].pid.has_value());
  REQUIRE(beat.resources.has_value());
  CHECK(beat.resources->gpus.at(0).power_w == 350.25);
  CHECK(beat.resources->xids.at(0).xid == 79);
}

TEST_CASE("every field of a beat, wrong or missing, gives the same message or error on both paths") {
  AgentFrameParser parser;
  // Wrong types, out of range (negative, above int, above int64), nulls, a float that is and
  // one that is not whole, strings over the limits.
  const std::vector<json> replacements = {
      json(nullptr), json("x"), json::array({1}), json::object({{"x", 1}}), json(1.5), json(-1), json(-2),
      json(4294967296), json(18446744073709551615ULL), json(1e300), json(2.0), json(true), json(0),
      json(5000), json(std::string(70, 's')), json("train"), json("checkpoint"), json::array()};
  int compared = 0, refused = 0, fast = 0;
  auto compare = [&](const json& variant) {
    std::string body = variant.dump();
    CAPTURE(body);
    Result<AgentMessage> generic = parse_generically(body);
    CHECK(describe(parser.parse(body)) == describe(generic));
    std::optional<AgentBeat> accepted = parser.read_beat(body);
    if (accepted) {
      ++fast;
      CHECK(describe(AgentMessage(*accepted)) == describe(generic));
    }
    ++compared;
    if (!generic) ++refused;
  };
  for (const json& replacement : replacements) each_variant(full_agent_beat(), replacement, compare);
  each_variant(full_agent_beat(), std::nullopt, compare);
  CHECK(compared > 1000);
  CHECK(refused > 300);
  CHECK(fast > 100);
}

TEST_CASE("a bad field of a beat is the agent's error, a bad held worker beat the worker's") {
  AgentFrameParser parser;
  auto error_of = [&](const json& beat) {
    Result<AgentMessage> parsed = parser.parse(beat.dump());
    CHECK(describe(parsed) == describe(parse_generically(beat.dump())));
    return parsed ? std::string() : parsed.error().message;
  };
  json beat = full_agent_beat();
  beat["workers"][0]["rank"] = "zero";
  CHECK(error_of(beat) == "beat.workers[].rank: expected an integer, got a string \"zero\"");
  beat = full_agent_beat();
  beat["worker_beats"][0]["gen"] = 4294967296;
  CHECK(error_of(beat) == "beat.worker_beats[].gen: 4294967296 is out of range [-1, 2147483647]");
  beat = full_agent_beat();
  beat["worker_beats"][0].erase("msg");
  CHECK(error_of(beat) == "beat.worker_beats[].msg: missing (expected an object)");
  beat["worker_beats"][0]["msg"] = json::array();
  CHECK(error_of(beat) == "beat.worker_beats[].msg: expected an object, got an array of 0");
  beat = full_agent_beat();
  beat["resources"]["gpus"][0]["temperature_c"] = 5000;
  CHECK(error_of(beat) == "beat.resources.gpus[].temperature_c: 5000 is out of range [-300, 1000]");
  beat = full_agent_beat();
  beat["load1"] = "high";
  CHECK(error_of(beat) == "beat.load1: expected a number, got a string \"high\"");

  // The worker's beat is bad: the frame parses, the entry carries the worker's error.
  beat = full_agent_beat();
  beat["worker_beats"][0]["msg"]["step"] = "x";
  CHECK_FALSE(parser.read_beat(beat.dump()).has_value());
  Result<AgentMessage> parsed = parser.parse(beat.dump());
  REQUIRE(parsed.ok());
  CHECK(describe(parsed) == describe(parse_generically(beat.dump())));
  const FromWorker& held = std::get<AgentBeat>(*parsed).worker_beats.at(0);
  REQUIRE_FALSE(held.msg.ok());
  CHECK(held.msg.error().message == "beat.step: expected an integer, got a string \"x\"");
  // A request in worker_beats (no agent sends one) is parsed like any worker message, and a bad
  // one keeps its id for the error reply.
  beat["worker_beats"][0]["msg"] = {{"type", "kv.get"}, {"id", 7}};
  parsed = parser.parse(beat.dump());
  REQUIRE(parsed.ok());
  CHECK(describe(parsed) == describe(parse_generically(beat.dump())));
  CHECK(std::get<AgentBeat>(*parsed).worker_beats.at(0).failed_request_id == 7);
}

/// Counts of compare_variants: bodies compared, accepted by the fast reader, refused generically.
struct VariantCounts {
  int compared = 0, fast_accepted = 0, refused = 0;
};

/// Every variant of `root` (each field replaced by each of `replacements`, or left out): the
/// parser's answer is the generic path's, and what `read_fast` accepts is the generic message.
template <class ReadFast>
VariantCounts compare_variants(AgentFrameParser& parser, const json& root, const std::vector<json>& replacements,
                               ReadFast read_fast) {
  VariantCounts counts;
  auto compare = [&](const json& variant) {
    std::string body = variant.dump();
    CAPTURE(body.substr(0, 200));
    Result<AgentMessage> generic = parse_generically(body);
    CHECK(describe(parser.parse(body)) == describe(generic));
    if (auto accepted = read_fast(body)) {
      ++counts.fast_accepted;
      CHECK(describe(AgentMessage(*accepted)) == describe(generic));
    }
    ++counts.compared;
    if (!generic) ++counts.refused;
  };
  for (const json& replacement : replacements) each_variant(root, replacement, compare);
  each_variant(root, std::nullopt, compare);
  return counts;
}

TEST_CASE("a relay_from reads the same on the fast path as through nlohmann's DOM, wrong fields included") {
  AgentFrameParser parser;
  // A relayed host's beat frame, as a relay carries it.
  std::string carried = encode_frame(full_agent_beat());
  std::string encoded = base64_encode(carried);
  json from = {{"type", "relay_from"}, {"host", "h17"}, {"data", encoded}, {"diagnostics", "ssh: warning"}};
  std::optional<RelayFromReport> fast = parser.read_relay_from(from.dump());
  REQUIRE(fast.has_value());
  CHECK(fast->host == "h17");
  CHECK(fast->data == carried);  // the bytes, decoded, as the generic path gives them
  CHECK(fast->diagnostics == "ssh: warning");
  CHECK(describe(AgentMessage(*fast)) == describe(parse_generically(from.dump())));

  const std::vector<json> replacements = {json(nullptr), json("x"),   json("not base64!"), json(""),
                                          json(1),       json(true),  json::array(),       json::object(),
                                          json(std::string(1025, 'h')), json(std::string(70'000, 'A'))};
  VariantCounts counts =
      compare_variants(parser, from, replacements, [&](std::string_view body) { return parser.read_relay_from(body); });
  CHECK(counts.compared > 40);
  CHECK(counts.refused > 10);
  CHECK(counts.fast_accepted > 5);
}

TEST_CASE("a relay_batch reads the same on the fast path as through nlohmann's DOM, wrong fields included") {
  AgentFrameParser parser;
  json batch = {{"type", "relay_batch"},
                {"messages", json::array({{{"host", "h17"}, {"message", full_agent_beat()}},
                                          {{"host", "h18"}, {"message", {{"type", "pong"}, {"id", 3}, {"agent_time_ms", 9}}}},
                                          {{"host", "h17"}, {"message", {{"type", "beat"}}}}})}};
  std::optional<RelayBatchReport> fast = parser.read_relay_batch(batch.dump());
  REQUIRE(fast.has_value());
  REQUIRE(fast->messages.size() == 3);
  CHECK(fast->messages[0].host == "h17");
  CHECK(std::get<AgentBeat>(fast->messages[0].message) == *parser.read_beat(full_agent_beat().dump()));
  CHECK(std::get<Pong>(fast->messages[1].message).id == 3);
  CHECK(describe(AgentMessage(*fast)) == describe(parse_generically(batch.dump())));
  // parse() takes the fast path for it, though the beats inside say "type":"beat" too (it once
  // tried a beat's and gave the batch to nlohmann: 60 % of a core at 16,384 hosts).
  uint64_t fast_before = parser.fast_parses();
  REQUIRE(parser.parse(batch.dump()).ok());
  CHECK(parser.fast_parses() == fast_before + 1);

  const std::vector<json> replacements = {json(nullptr), json("x"), json(-1), json(1.5), json(true), json::array(),
                                          json::object(), json(std::string(1025, 'h'))};
  VariantCounts counts =
      compare_variants(parser, batch, replacements, [&](std::string_view body) { return parser.read_relay_batch(body); });
  CHECK(counts.compared > 600);
  CHECK(counts.refused > 200);
  CHECK(counts.fast_accepted > 50);

  // What a batch may carry, and the errors that name the host inside it.
  auto error_of = [&](const json& body) {
    Result<AgentMessage> parsed = parser.parse(body.dump());
    CHECK(describe(parsed) == describe(parse_generically(body.dump())));
    return parsed ? std::string() : parsed.error().message;
  };
  json port = batch;
  port["messages"][1]["message"] = {{"type", "port"}, {"id", 1}, {"port", 29500}};
  CHECK(error_of(port) == "relay_batch.messages[] (host h18): a port, but a batch carries only beats and pongs");
  json bad_beat = batch;
  bad_beat["messages"][0]["message"]["load1"] = "high";
  CHECK(error_of(bad_beat) == "relay_batch.messages[] (host h17): beat.load1: expected a number, got a string \"high\"");
  json no_host = batch;
  no_host["messages"][2].erase("host");
  CHECK(error_of(no_host) == "relay_batch.messages[].host: missing (expected a string)");
}

TEST_CASE("JSON corner cases take the generic path or agree with it: duplicates, escapes, bad bytes") {
  AgentFrameParser parser;
  auto same = [&](const std::string& body) {
    CAPTURE(body);
    CHECK(describe(parser.parse(body)) == describe(parse_generically(body)));
  };
  // The last of duplicate keys wins in nlohmann's DOM; the fast path reads them the same way.
  same(R"({"type":"beat","load1":"x","load1":2.5})");
  same(R"({"type":"beat","worker_beats":[{"gen":0,"rank":1,"msg":{"type":"beat","step":"x","step":3}}]})");
  same(R"({"type":"beat","worker_beats":[{"gen":0,"rank":1,"msg":{"type":"bye","type":"beat","step":3}}]})");
  same(R"({"type":"log","type":"beat"})");
  same(R"({"type":"beat","type":"log","line":"x","gen":0,"rank":0})");
  CHECK(parser.read_beat(R"({"type":"beat","load1":"x","load1":2.5})")->load1 == 2.5);
  // \u escapes (lone surrogates differ between parsers) and raw control bytes: generic path.
  same(R"({"type":"beat","workers":[{"state":"\ud800"}]})");
  same(R"({"type":"beat","workers":[{"state":"\udc00"}]})");
  same(R"({"type":"beat","workers":[{"state":"\u0054"}]})");
  same(std::string("{\"type\":\"beat\",\"workers\":[{\"state\":\"\x01\"}]}"));
  same("{\"type\":\"beat\",\"workers\":[{\"state\":\"\xff\"}]}");
  same("{\"type\":\"beat\",\"workers\":[{\"state\":\"\xed\xa0\x80\"}]}");
  // Numbers beyond 64 bits, beyond double, and a negative zero.
  same(R"({"type":"beat","agent_time_ms":100000000000000000000})");
  same(R"({"type":"beat","agent_time_ms":-100000000000000000000})");
  same(R"({"type":"beat","load1":1e400})");
  same(R"({"type":"beat","load1":-0,"agent_time_ms":-0})");
  // Not JSON, not an object, no type, trailing bytes.
  for (std::string body : {"", "not json", "[1]", R"({"load1":1})", R"({"type":7})",
                           R"({"type":"beat"} x)", R"({"type":"beat"}{"type":"beat"})"}) {
    same(body);
  }
  CHECK(describe(parser.parse("[1]")) == "error: frame is a JSON array, not an object");
}

TEST_CASE("a relay_to frame written directly is byte for byte the frame nlohmann would write") {
  std::string binary;
  for (int i = 0; i < 1000; ++i) binary += static_cast<char>((i * 37) & 0xff);
  const std::vector<std::string> hosts = {"h17", "gpu-node-0001.cluster.example", "quote\"back\\slash", "tab\there\n",
                                          std::string("nul\0byte", 8), "\xff\xfe not UTF-8", "h\xc3\xa9t\xc3\xa9", ""};
  const std::vector<std::string> payloads = {"", "a", "ab", "abc", binary, std::string(kMaxRelayChunkBytes, 'x')};
  for (const std::string& host : hosts) {
    for (const std::string& data : payloads) {
      CAPTURE(host);
      CAPTURE(data.size());
      SupervisorMessage message = RelayToRequest{host, data};
      Result<std::string> direct = encode_supervisor_frame(message);
      Result<std::string> generic = encode_frame_checked(to_json(message));
      REQUIRE(direct.ok());
      REQUIRE(generic.ok());
      CHECK(*direct == *generic);
    }
  }
  // Other messages take the generic path; a frame over the limit is refused with its Error.
  SupervisorMessage ping = PingRequest{7, 1'700'000'000'000};
  CHECK(*encode_supervisor_frame(ping) == *encode_frame_checked(to_json(ping)));
  SupervisorMessage huge = RelayToRequest{"h1", std::string(kMaxFrameBytes, 'x')};
  Result<std::string> refused = encode_supervisor_frame(huge);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.error().message.find("relay_to frame") != std::string::npos);
}

TEST_CASE("a pong reads the same on the fast path as through nlohmann's DOM, wrong fields included") {
  AgentFrameParser parser;
  json pong = {{"type", "pong"}, {"id", 12}, {"agent_time_ms", 1'700'000'000'123}, {"supervisor_time_ms", 1'700'000'000'100}};
  std::optional<Pong> fast = parser.read_pong(pong.dump());
  REQUIRE(fast.has_value());
  CHECK(*fast == Pong{12, 1'700'000'000'123, 1'700'000'000'100});
  const std::vector<json> replacements = {json(nullptr), json("12"), json(1.5), json(1e300), json(-7),
                                          json(true),    json::array(), json::object(), json(2.0)};
  VariantCounts counts =
      compare_variants(parser, pong, replacements, [&](std::string_view body) { return parser.read_pong(body); });
  CHECK(counts.compared > 30);
  CHECK(counts.refused > 5);
  CHECK(counts.fast_accepted > 10);
}
