// Every message of the agent protocol, both directions, and of the worker protocol survives its
// own serialisation: parse(to_json(m)) == m. The samples fill every optional field (and a second
// sample of some leaves them out), and a check below makes sure each alternative of each variant
// has a sample, so a message added without one fails here.
#include <doctest/doctest.h>

#include <set>
#include <string>
#include <vector>

#include "launcher/proto/agent_frame_parser.h"
#include "launcher/proto/agent_messages.h"
#include "launcher/proto/messages.h"
#include "launcher/proto/supervisor_messages.h"
#include "launcher/proto/worker_messages.h"

using namespace dtrain::proto;
using nlohmann::json;

namespace {

std::vector<SupervisorMessage> supervisor_samples() {
  SpawnRequest spawn;
  spawn.gen = 3;
  spawn.argv = {"python3", "train.py", "--lr", "0.1"};
  spawn.workdir = "/work";
  spawn.env = {{"MASTER_ADDR", "10.0.0.1"}, {"OMP_NUM_THREADS", "1"}};
  spawn.workers = {{0, 0, {{"RANK", "0"}}}, {5, 1, {}}};
  spawn.log_tail_lines = 20;
  spawn.instrument = true;
  spawn.standby = 2;
  spawn.standby_bootstrap = std::vector<std::string>{"torch", "numpy"};
  SpawnRequest minimal_spawn;
  minimal_spawn.argv = {"a"};
  AgentConfig with_stack{kProtocolVersion, "run-1", "gpu01", "/tmp/dtrain-0/abc", 1000, 10'000, 1'700'000'000'000, true};
  with_stack.stack = StackProbeRequest{{"/usr/bin/python3", "train.py"}, "/work", {{"PYTHONPATH", "/site"}}, 3000};
  AgentConfig with_health{kProtocolVersion, "run-1", "gpu01", "/tmp/dtrain-0/abc", 1000, 10'000, std::nullopt, false};
  with_health.health = HealthRequest{"/ckpt", "10.0.0.1", "/usr/sbin/nhc", 20'000, "dcgmi diag -r 1", 120'000, 256, 0, 3000, 4096};
  with_health.reattach_ms = 10'000;
  return {
      with_stack,
      with_health,
      AgentConfig{kProtocolVersion, "run-1", "gpu01", "/tmp/dtrain-0/abc", 1000, 10'000, 1'700'000'000'000, true},
      AgentConfig{kProtocolVersion, "run-1", "gpu01", "/tmp/dtrain-0/abc", 1, 2, std::nullopt, false},
      spawn,
      minimal_spawn,
      KillRequest{2, KillSignal::term, 5000, std::nullopt},
      KillRequest{-1, KillSignal::kill, 0, std::vector<int>{1, 3}},
      PingRequest{7, 1'700'000'000'123},
      PingRequest{},
      ToWorkerRequest{4, 2, json{{"type", "kv.ok"}, {"id", 9}}},
      ReservePortRequest{11},
      FenceRequest{"run finished"},
      FenceRequest{},
      SampleRequest{12, 3, 1, 4242, 5000},
      DumpRequest{13, 3, 2500},
      GenChangedRequest{14, 3, 4},
      HealthCheckRequest{15, "after failure", true},
      HealthCheckRequest{16, "join", false},
      RelayOpenRequest{RelaySsh{"openssh", "train", 2222, {"/keys/id_ed25519"}, false, "/keys/known_hosts", "accept-new",
                                5000, 60'000, 16, "/opt/dtrain/bin/dtrain", "/etc/ssh/cluster_config", "/usr/bin/ssh"},
                       {{"gpu02", "train", 22, ""}, {"gpu03", "", 0, "/opt/dtrain"}}},
      RelayOpenRequest{},
      // Protocol bytes are binary: a length prefix with NUL bytes, then JSON.
      RelayToRequest{"gpu02", std::string("\0\0\0\x02{}", 6)},
      RelayToRequest{"gpu02", ""},
      RelayCloseRequest{"gpu03"},
      RelayFanoutRequest{{"gpu02", "gpu03"}, std::string("\0\0\0\x02{}", 6)},
      RelayFanoutRequest{},
      AgentAttachRequest{"/tmp/dtrain-0/abc/gpu03.attach"},
  };
}

std::vector<WorkerMessage> worker_samples() {
  return {
      WorkerHello{3, 2, 1234},
      WorkerHello{0, 0, std::nullopt},
      WorkerBeat{42, {.step_ms = 120.25, .loss = 0.5, .comm_ms = 30.0, .data_ms = 4.0, .samples = 256}, WorkerPhase::checkpoint},
      WorkerBeat{0, {}, std::nullopt},
      KvSetRequest{1, "addr/0", "10.0.0.1:4000"},
      KvGetRequest{2, "addr/0"},
      KvWaitRequest{3, {"a", "b"}, 1000},
      KvWaitRequest{4, {"a"}, std::nullopt},
      KvAddRequest{5, "count", -7},
      GenCheckRequest{6},
      CommReady{12.5},
      CommReady{},
      CheckpointCommittedReport{100, 1 << 20, 52.5},
      CheckpointRejectedReport{100, "generation 3 is no longer current"},
      WorkerBye{"finished"},
  };
}

std::vector<AgentMessage> agent_samples() {
  AgentHello hello;
  hello.protocol = kProtocolVersion;
  hello.version = "1.2.3";
  hello.host = "gpu01";
  hello.pid = 4321;
  hello.agent_time_ms = 1'700'000'000'000;
  hello.socket = "/tmp/dtrain-0/abc/gpu01.sock";
  hello.attach_socket = "/tmp/dtrain-0/abc/gpu01.attach";
  hello.facts = {{"hostname", "gpu01"}, {"gpus", json::array({{{"index", 0}, {"name", "H100"}}})}};
  StackFingerprint stack;
  stack.os = "Debian GNU/Linux 12 (bookworm)";
  stack.kernel = "6.1.0";
  stack.gpu_driver = "550.54.15";
  stack.cuda = "12.4.1";
  stack.nccl = "2.21.5";
  stack.python = "3.11.2";
  stack.torch = "2.3.1";
  stack.python_nccl = "2.20.5";
  stack.python_cuda = "none";
  stack.image = "sha256:abc";
  stack.files = {{"train.py", "ab12"}, {"big.bin", "unknown (larger than 64 MiB: not hashed)"}};
  stack.ms = 31;
  stack.notes = {"python: slow"};
  hello.stack = stack;

  WorkerExitReport crashed;
  crashed.gen = 2;
  crashed.rank = 5;
  crashed.pid = 999;
  crashed.signal = 9;
  crashed.signal_name = "SIGKILL";
  crashed.core_dumped = true;
  crashed.agent_time_ms = 17;
  crashed.tail = {"line one", "line two"};
  crashed.killed_by_agent = true;
  crashed.local_rank = 1;
  crashed.error = WorkerErrorRecord{"ValueError", "bad batch", "Traceback...", 1'700'000'000};
  WorkerExitReport exited;
  exited.code = 3;

  HostResources resources;
  resources.agent_time_ms = 5;
  resources.cpu_percent = 37.5;
  resources.memory_used_mb = 1000;
  resources.memory_total_mb = 4000;
  resources.workers = {{2, 5, 999, 250.5, 1024, 3}};
  resources.gpus = {{0, 99.0, 1000, 80'000, 300.5, 70, 0, 0}, {1, std::nullopt, std::nullopt, std::nullopt,
                                                                std::nullopt, std::nullopt, std::nullopt, std::nullopt}};
  resources.gpu_source = "nvml";
  resources.gpu_error = "partial";
  resources.xids = {{0, 79, 4}};
  AgentBeat beat;
  beat.agent_time_ms = 8;
  beat.workers = {{2, 5, 999, true, "T"}};
  beat.load1 = 0.75;
  beat.mem_available_mb = 12'345;
  beat.worker_beats = {FromWorker{2, 5, 999, WorkerMessage(WorkerBeat{7, {.step_ms = 100.0, .loss = 1.5, .samples = 32}, std::nullopt})}};
  beat.resources = resources;

  return {
      hello,
      AgentHello{},
      WorkerStartedReport{2, 5, 999, 1, 1'700'000'000'000, true},
      WorkerStartedReport{2, 5, 999},
      WorkerSpawnFailedReport{2, 5, "exec: no such file"},
      crashed,
      exited,
      WorkerLogLine{2, 5, "stderr", "NCCL WARN something"},
      FromWorker{2, 5, 999, WorkerMessage(KvSetRequest{1, "k", "v"})},
      FromWorker{2, 5, std::nullopt, WorkerMessage(WorkerHello{5, 2, std::nullopt})},
      beat,
      AgentBeat{},
      Pong{7, 8, 9},
      Pong{},
      PortReply{11, 29500},
      SampleReply{12, 3, 1, 4242, "stack...", std::nullopt},
      SampleReply{std::nullopt, 3, 1, 4242, std::nullopt, "exited"},
      Released{std::vector<int64_t>{1}, 3, {100, 101}, 1, 250, {102}},
      Released{std::nullopt, 3, {}, 0, 0, {}},
      AgentError{"cannot find a free TCP port", "reserve_port", 11, std::nullopt, std::nullopt},
      AgentError{"no worker connection", "to_worker", std::nullopt, 2, 5},
      AgentBye{"stdin closed", {100, 101}},
      WorkerProtocolError{2, 5, 999, "malformed JSON line 'x'", true},
      WorkerProtocolError{std::nullopt, std::nullopt, 999, "the first line must be hello", false},
      FlightRecorderDump{13, 3, 1, 4242, 3, "YWJj", std::nullopt, std::nullopt, "older"},
      FlightRecorderDump{13, 3, 1, 4242, 1 << 30, std::nullopt, "/tmp/fr/1", std::nullopt, std::nullopt},
      GenChangedReply{14, 3, 4, {0, 1}, {100, 101}},
      HealthReply{0, HealthReport{"start", {{"checkpoint dir", HealthVerdict::fail, "write + fsync did not finish within 5s"},
                                            {"site command", HealthVerdict::warn, "exit 7: ?"}}, 35}},
      HealthReply{15, HealthReport{"after failure", {}, 0}},
      RelayFromReport{"gpu02", std::string("\0\0\0\x02{}\xff", 7), "agent gpu02: relaying\n"},
      RelayFromReport{"gpu02", "", ""},
      RelayClosedReport{"gpu03", "gpu03: connect to 10.0.0.3:22 timed out after 10s"},
      ReattachedReport{"gpu03", 4321, 180, "the supervisor closed the channel (stdin EOF)", {{2, 5, 999}, {2, 6, 1000}},
                       {crashed, exited}},
      ReattachedReport{"gpu03", 4321, 0, "", {}, {}},
      RelayBatchReport{{{"gpu04", beat}, {"gpu05", Pong{7, 8, 9}}, {"gpu04", AgentBeat{}}}},
      RelayBatchReport{},
  };
}

template <class Variant>
void check_every_alternative(const std::vector<Variant>& samples) {
  std::set<size_t> seen;
  for (const Variant& sample : samples) seen.insert(sample.index());
  CHECK(seen.size() == std::variant_size_v<Variant>);
}

}  // namespace

TEST_CASE("round trip: every supervisor → agent message parses back to itself") {
  std::vector<SupervisorMessage> samples = supervisor_samples();
  check_every_alternative(samples);
  for (const SupervisorMessage& sample : samples) {
    json frame = to_json(sample);
    CAPTURE(frame.dump());
    CHECK(frame["type"] == type_of(sample));
    auto parsed = parse_supervisor_message(frame);
    REQUIRE_MESSAGE(parsed.ok(), (parsed.ok() ? "" : parsed.error().message));
    CHECK(*parsed == sample);
  }
}

TEST_CASE("round trip: every agent → supervisor message parses back to itself, the fast beat path too") {
  std::vector<AgentMessage> samples = agent_samples();
  check_every_alternative(samples);
  AgentFrameParser fast;
  for (const AgentMessage& sample : samples) {
    json frame = to_json(sample);
    CAPTURE(frame.dump());
    CHECK(frame["type"] == type_of(sample));
    auto parsed = parse_agent_message(frame);
    REQUIRE_MESSAGE(parsed.ok(), (parsed.ok() ? "" : parsed.error().message));
    CHECK(*parsed == sample);
    // What the driver calls on a frame body: the same message, whichever path reads it; the
    // messages of every host and interval on their fast path.
    uint64_t fast_before = fast.fast_parses();
    auto from_body = fast.parse(frame.dump());
    REQUIRE(from_body.ok());
    CHECK(*from_body == sample);
    bool frequent = std::holds_alternative<AgentBeat>(sample) || std::holds_alternative<Pong>(sample) ||
                    std::holds_alternative<RelayFromReport>(sample) || std::holds_alternative<RelayBatchReport>(sample);
    CHECK(fast.fast_parses() == fast_before + (frequent ? 1 : 0));
  }
}

TEST_CASE("round trip: every worker message parses back to itself") {
  std::vector<WorkerMessage> samples = worker_samples();
  check_every_alternative(samples);
  for (const WorkerMessage& sample : samples) {
    json line = to_json(sample);
    CAPTURE(line.dump());
    auto parsed = parse_worker_message(line);
    REQUIRE_MESSAGE(parsed.ok(), (parsed.ok() ? "" : parsed.error().message));
    CHECK(*parsed == sample);
  }
}

TEST_CASE("agent → worker messages are the lines the worker protocol names") {
  CHECK(to_json(ToWorkerMessage(StoreOk{1})) == json{{"type", "kv.ok"}, {"id", 1}});
  CHECK(to_json(ToWorkerMessage(StoreValue{2, std::nullopt})) == json{{"type", "kv.value"}, {"id", 2}, {"value", nullptr}});
  CHECK(to_json(ToWorkerMessage(StoreValue{2, "v"})) == json{{"type", "kv.value"}, {"id", 2}, {"value", "v"}});
  CHECK(to_json(ToWorkerMessage(StoreValues{3, {"a", "b"}})) ==
        json{{"type", "kv.values"}, {"id", 3}, {"values", {"a", "b"}}});
  CHECK(to_json(ToWorkerMessage(GenOk{4, true, 7})) ==
        json{{"type", "gen.ok"}, {"id", 4}, {"current", true}, {"generation", 7}});
  CHECK(to_json(ToWorkerMessage(RequestFailed{5, "no"})) == json{{"type", "error"}, {"id", 5}, {"error", "no"}});
  CHECK(to_json(ToWorkerMessage(CheckpointRequest{40, "SIGUSR1"})) ==
        json{{"type", "ckpt.request"}, {"step", 40}, {"reason", "SIGUSR1"}});
  CHECK(to_json(ToWorkerMessage(GenerationChanged{4})) == json{{"type", "gen.changed"}, {"gen", 4}});
  CHECK(to_json(ToWorkerMessage(StandbyAssign{4, 2, {{"RANK", "2"}}})) ==
        json{{"type", "assign"}, {"gen", 4}, {"rank", 2}, {"env", {{"RANK", "2"}}}});
}

TEST_CASE("a bad supervisor frame is an error naming the message and the field, never an exception") {
  struct Case {
    json frame;
    const char* expected;
  };
  std::vector<Case> cases = {
      {{{"type", "kill"}, {"gen", "one"}, {"signal", "TERM"}}, "kill.gen: expected an integer, got a string \"one\""},
      {{{"type", "kill"}, {"gen", 0}, {"signal", "HUP"}}, "kill.signal: expected \"TERM\" or \"KILL\", got \"HUP\""},
      {{{"type", "kill"}, {"gen", 0}, {"signal", "KILL"}, {"ranks", json::array()}},
       "kill.ranks: expected a non-empty array of integers"},
      {{{"type", "gen_changed"}, {"from", 0}, {"to", 1}}, "gen_changed.id: missing (expected an integer)"},
      {{{"type", "gen_changed"}, {"id", 1}, {"from", 2}, {"to", 2}},
       "gen_changed: 'to' must be greater than 'from', got from 2 to 2"},
      {{{"type", "spawn"}, {"gen", 0}, {"argv", json::array()}, {"workers", json::array()}},
       "spawn.argv: expected a non-empty array of strings"},
      {{{"type", "spawn"}, {"gen", 0}, {"argv", {"a"}}, {"workers", {{{"rank", 0}, {"local_rank", 0}, {"env", {{"A", 1}}}}}}},
       "spawn.workers[].env: expected an object of strings"},
      {{{"type", "spawn"}, {"gen", 0}, {"argv", {"a"}}}, "spawn.workers: missing"},
      {{{"type", "spawn"}, {"gen", 0}, {"argv", {"a"}}, {"workers", json::array()}, {"standby", 65}},
       "spawn.standby: must be 0 to 64, got 65"},
      {{{"type", "spawn"}, {"gen", 0}, {"argv", {"a"}}, {"workers", json::array()}, {"standby_bootstrap", "torch"}},
       "spawn.standby_bootstrap: expected an array of strings"},
      {{{"type", "config"}, {"protocol", 1}}, "config.run_id: missing (expected a string)"},
      {{{"type", "to_worker"}, {"gen", 0}, {"rank", 0}, {"msg", "text"}}, "to_worker.msg: expected an object"},
      {{{"type", "sample"}, {"id", 1}, {"gen", 0}, {"rank", 0}, {"pid", 5}}, "sample.timeout_ms: missing"},
      {{{"type", "dump"}, {"gen", 0}, {"timeout_ms", 1.5}}, "dump.timeout_ms: expected an integer"},
      {{{"type", "fence"}, {"reason", 3}}, "fence.reason: expected a string"},
      {{{"type", "launch_missiles"}}, "unknown message type 'launch_missiles'"},
      {json::array(), "not an object"},
      {{{"id", 1}}, "no string \"type\""},
  };
  for (const Case& c : cases) {
    CAPTURE(c.frame.dump());
    auto parsed = parse_supervisor_message(c.frame);
    REQUIRE_FALSE(parsed.ok());
    CHECK(parsed.error().message.find(c.expected) != std::string::npos);
  }
}
