// The typed parsers of what workers and agents send (proto/worker_messages.h,
// proto/agent_messages.h): every field of every message, wrongly typed, is an error that names
// the message and the field — never an exception — and a valid message round-trips.

#include <doctest/doctest.h>

#include <algorithm>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "launcher/proto/agent_messages.h"
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
  CHECK(beat.worker_beats[0].msg["step"] == 2);
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
