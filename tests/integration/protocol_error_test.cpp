// Nothing a worker sends ends a run: real workers under `dtrain submit` write every wrongly typed
// field of every message type (and binary garbage) to their agent socket. Each bad line is a
// protocol.error event naming the worker; the run goes on and succeeds. A worker that keeps
// sending garbage is treated as failed, with that as the root cause.

#include <doctest/doctest.h>

#include <set>

#include "tests/integration/dtrain_runner.h"
#include "tests/skip.h"

using namespace dtrain::testing;

namespace {

/// A worker in plain Python (no dtrain client): the protocol spoken by hand, as a user's own
/// client in any language would. argv: mode ("table" | "flood").
constexpr const char* kHostileWorker = R"PY(
import json, os, socket, sys

mode = sys.argv[1]
rank = int(os.environ["RANK"])
world = int(os.environ["WORLD_SIZE"])
sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
sock.connect(os.environ["DTRAIN_AGENT_SOCKET"])
reader = sock.makefile("rb")

def send_raw(data):
    sock.sendall(data + b"\n")

def send(message):
    send_raw(json.dumps(message).encode())

def reply_to(request_id):
    while True:
        line = reader.readline()
        if not line:
            raise SystemExit("agent closed the connection while rank %d waited for id %d" % (rank, request_id))
        reply = json.loads(line)
        if reply.get("id") == request_id:
            return reply

send({"type": "hello", "rank": rank, "gen": int(os.environ["DTRAIN_GENERATION"]), "pid": os.getpid()})

valid = [
    {"type": "hello", "rank": rank, "gen": 0, "pid": 1},
    {"type": "beat", "step": 1, "loss": 0.5, "step_ms": 1.0, "comm_ms": 1.0, "data_ms": 1.0, "samples": 4},
    {"type": "kv.set", "id": 1, "key": "k", "value": "v"},
    {"type": "kv.get", "id": 1, "key": "k"},
    {"type": "kv.wait", "id": 1, "keys": ["k"], "timeout_ms": 10},
    {"type": "kv.add", "id": 1, "key": "n", "delta": 1},
    {"type": "gen.check", "id": 1},
    {"type": "comm.ready", "ms": 5},
    {"type": "ckpt.committed", "step": 1, "bytes": 2, "ms": 3.0},
    {"type": "ckpt.rejected", "step": 1, "reason": "r"},
    {"type": "bye", "reason": "r"},
]
wrong_values = [None, "x", [1], {"x": 1}, True, 1.5]
# Every (message, field, wrong value) whose type differs from the valid one; null only where the
# field is required. Spread over the ranks so that no worker reaches the 100-error limit.
optional = {"hello.pid", "beat.loss", "beat.step_ms", "beat.comm_ms", "beat.data_ms", "beat.samples",
            "kv.wait.timeout_ms", "comm.ready.ms", "ckpt.committed.bytes", "ckpt.committed.ms",
            "ckpt.rejected.reason", "bye.reason"}
table = []
for message in valid:
    for key, good in message.items():
        if key == "type":
            continue
        for wrong in wrong_values:
            if type(wrong) is type(good) or (isinstance(good, float) and isinstance(wrong, (int, float)) and not isinstance(wrong, bool)):
                continue
            if wrong is None and (message["type"] + "." + key) in optional:
                continue
            bad = dict(message)
            bad[key] = wrong
            table.append((message["type"] + "." + key, bad))

sent = 0
if mode == "table":
    for index, (field, bad) in enumerate(table):
        if index % world != rank:
            continue
        if "id" in bad and not field.endswith(".id"):
            # A request with a usable id is answered with the error, so the worker need not wait.
            bad["id"] = 1000 + index
            send(bad)
            reply = reply_to(1000 + index)
            assert reply["type"] == "error", reply
            assert field + ":" in reply["error"], (field, reply)
        else:
            send(bad)
        sent += 1
    for raw in (b"not json", b"\x00\x01\xff\xfe", b"[1,2,3]", b'{"type":5}', b'{"type":"nope"}',
                b'{"type":"beat","step":null}'):
        send_raw(raw)
        sent += 1
    # The connection still works: a store round trip and progress after all that.
    send({"type": "kv.set", "id": 1, "key": "alive/%d" % rank, "value": "yes"})
    assert reply_to(1)["type"] == "kv.ok"
    send({"type": "kv.get", "id": 2, "key": "alive/%d" % rank})
    assert reply_to(2)["value"] == "yes"
    send({"type": "beat", "step": 5})
    print("rank %d sent %d bad lines of %d table entries" % (rank, sent, len(table)), flush=True)
    send({"type": "bye", "reason": "finished"})
elif mode == "flood":
    if rank == 1:
        for _ in range(150):
            send_raw(b'{"type":"beat","step":"many"}')
    import time
    time.sleep(60)  # ended by dtrain
)PY";

std::string hostile_spec(const std::string& script, const std::string& mode, int ranks) {
  return "version: 1\nname: hostile-" + mode + "\nslots_per_host: " + std::to_string(ranks) +
         "\nworker:\n  command: [/usr/bin/python3, '" + script + "', " + mode +
         "]\nheartbeat: {interval: 200ms, timeout: 3s, hang_timeout: 60s}\nstop_grace: 2s\n"
         "elastic: {max_restarts: 0}\n";
}

void require_python() {
  if (::access("/usr/bin/python3", X_OK) != 0) skip_test("/usr/bin/python3 is not installed");
}

}  // namespace

TEST_CASE("a worker sending every wrongly typed field of every message type does not end the run") {
  require_python();
  DtrainEnv env;
  std::string script = env.dir.path + "/hostile.py";
  write_text(script, kHostileWorker);
  DtrainProcess process = env.run({"submit", env.write_spec("table.yaml", hostile_spec(script, "table", 4))});
  std::string dir = env.run_dirs().at(0);
  INFO(process.err() << read_text(dir + "/ranks/0.log") << read_text(dir + "/ranks/1.log"));
  CHECK(process.exit_code == 0);
  CHECK(process.err().find("internal bug") == std::string::npos);
  auto events = read_events(dir + "/events.jsonl");
  auto errors = events_named(events, "protocol.error");
  CHECK(errors.size() > 100);  // over the ranks together: far more than one sender may send
  std::set<std::string> fields;
  std::set<int> ranks;
  for (const auto& error : errors) {
    CHECK(error["sender"] == "worker");
    CHECK(error["host"] == "localhost");
    CHECK(error["pid"].get<int>() > 0);
    REQUIRE(error.contains("rank"));
    ranks.insert(error["rank"].get<int>());
    std::string text = error["error"];
    fields.insert(text.substr(0, text.find(':')));
  }
  CHECK(ranks == std::set<int>{0, 1, 2, 3});
  for (const char* field : {"beat.step", "beat.loss", "hello.rank", "kv.set.value", "kv.wait.keys",
                            "kv.add.delta", "gen.check.id", "ckpt.committed.step", "bye.reason"}) {
    CHECK_MESSAGE(fields.count(field) == 1, "no protocol.error for " << field);
  }
  CHECK(events_named(events, "failure.detected").empty());
  auto finished = events_named(events, "run.finished");
  REQUIRE(finished.size() == 1);
  CHECK(finished[0]["state"] == "succeeded");
  CHECK(processes_of_run(run_id_of(dir)).empty());
}

TEST_CASE("a worker that keeps sending garbage fails its rank with that as the root cause") {
  require_python();
  DtrainEnv env;
  std::string script = env.dir.path + "/hostile.py";
  write_text(script, kHostileWorker);
  DtrainProcess process = env.run({"submit", env.write_spec("flood.yaml", hostile_spec(script, "flood", 2))});
  std::string dir = env.run_dirs().at(0);
  INFO(process.err());
  CHECK(process.exit_code == 1);
  CHECK(process.err().find("internal bug") == std::string::npos);
  auto events = read_events(dir + "/events.jsonl");
  auto detected = events_named(events, "failure.detected");
  REQUIRE(detected.size() == 1);
  CHECK(detected[0]["kind"] == "worker.protocol");
  CHECK(detected[0]["rank"] == 1);
  CHECK(detected[0]["detail"].get<std::string>().find("100 messages that could not be parsed") != std::string::npos);
  CHECK(detected[0]["detail"].get<std::string>().find("beat.step: expected an integer") != std::string::npos);
  CHECK(events_named(events, "protocol.error").size() == 100);
  nlohmann::json state = nlohmann::json::parse(read_text(dir + "/state.json"));
  CHECK(state["root_cause"]["kind"] == "worker.protocol");
  CHECK(process.err().find("could not be parsed") != std::string::npos);
  bool gone = wait_until([&] { return processes_of_run(run_id_of(dir)).empty(); }, 5000);
  CHECK(gone);
}
