// worker/python/dtrain_worker.py from a real python3 process against the fake agent.
#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>

#include "tests/integration/fake_agent.h"
#include "tests/skip.h"

using dtrain::testing::FakeAgent;
using namespace std::chrono_literals;

namespace {

/// The first lines of a script run as `python3 script <dtrain_worker's dir> <a stand-in torch's dir>`.
constexpr const char* kBothPaths = "import sys\nsys.path.insert(0, sys.argv[1])\nsys.path.insert(0, sys.argv[2])\n";

/// A stand-in `torch` package under `dir` (file name → source), so that a test needs no PyTorch.
void write_stand_in_torch(const std::string& dir, const std::map<std::string, std::string>& files) {
  std::filesystem::create_directories(dir + "/torch");
  for (const auto& [name, source] : files) std::ofstream(dir + "/torch/" + name) << source;
}

}  // namespace

TEST_CASE("python client: hello, beats, kv set/get/wait and bye from a real python3") {
  FakeAgent agent;
  std::string script = agent.dir() + "/train.py";
  std::ofstream(script) << R"(
import sys
sys.path.insert(0, sys.argv[1])
from dtrain_worker import Worker, DtrainError
w = Worker.from_env()
w.kv_set("addr/%d" % w.rank, "host-%d" % w.rank)
assert w.kv_get("addr/%d" % w.rank) == "host-%d" % w.rank
assert w.kv_get("missing") is None
values = w.kv_wait(["addr/0", "addr/1"], timeout=20)
assert values == ["host-0", "host-1"], values
try:
    w.kv_wait(["never"], timeout=0.2)
    raise SystemExit("kv_wait should have timed out")
except DtrainError as error:
    assert "never" in str(error), error
assert w.generation_is_current()
for step in range(1, 51):
    w.beat(step, loss=2.0 / step, step_ms=1.5, samples=8)
w.beat(50, final=True, loss=0.04)
w.close()
print("python worker done")
)";
  agent.spawn(2, {"/usr/bin/python3", script, DTRAIN_SOURCE_DIR "/worker/python"});
  bool ok = agent.wait_all_ok(60s);
  REQUIRE_MESSAGE(ok, agent.log(0) << agent.log(1));
  CHECK(agent.log(0).find("python worker done") != std::string::npos);
  auto hellos = agent.received_of_type("hello");
  REQUIRE(hellos.size() == 2);
  int last_step = 0;
  int beats = 0;
  for (const auto& beat : agent.received_of_type("beat")) {
    if (beat.rank != 1) continue;
    ++beats;
    last_step = beat.msg["step"];
    CHECK(beat.msg.contains("loss"));
  }
  CHECK(last_step == 50);
  CHECK(beats < 50);  // rate-limited to DTRAIN_HEARTBEAT_INTERVAL_MS
  CHECK(agent.received_of_type("bye").size() == 2);
}

TEST_CASE("python client: outside dtrain it raises an error that says how to run it") {
  std::string command = "env -i /usr/bin/python3 -c 'import sys; sys.path.insert(0, \"" DTRAIN_SOURCE_DIR
                        "/worker/python\"); import dtrain_worker; dtrain_worker.Worker.from_env()' 2>&1 | "
                        "grep -q \"dtrain submit\"";
  CHECK(std::system(command.c_str()) == 0);
}

TEST_CASE("python client: comm_ready and init_process_group say comm.ready once, without swallowing a beat") {
  FakeAgent agent;
  // A stand-in torch.distributed that records the calls, so the test needs no PyTorch.
  write_stand_in_torch(agent.dir(), {{"__init__.py", ""}, {"distributed.py", R"(
import time
calls = []
def init_process_group(**kwargs):
    calls.append(("init", kwargs))
    time.sleep(0.05)
def barrier():
    calls.append(("barrier",))
)"}});
  std::string script = agent.dir() + "/train.py";
  std::ofstream(script) << kBothPaths << R"(
from dtrain_worker import Worker
import torch.distributed as dist
w = Worker.from_env()
if w.rank == 0:
    w.init_process_group(backend="gloo")
    assert [c[0] for c in dist.calls] == ["init", "barrier"], dist.calls
    assert dist.calls[0][1] == {"backend": "gloo"}, dist.calls
else:
    w.comm_ready(ms=1234.4)
w.comm_ready()  # a second call sends nothing
w.beat(1, loss=1.0)
w.close()
)";
  agent.spawn(2, {"/usr/bin/python3", script, DTRAIN_SOURCE_DIR "/worker/python", agent.dir()},
              {{"DTRAIN_HEARTBEAT_INTERVAL_MS", "60000"}});
  REQUIRE_MESSAGE(agent.wait_all_ok(60s), agent.log(0) << agent.log(1));
  std::map<int, std::vector<std::string>> order;  // per rank, types in arrival order
  for (const auto& message : agent.received()) order[message.rank].push_back(message.msg["type"]);
  for (int rank : {0, 1}) {
    CAPTURE(rank);
    CHECK(order[rank] == std::vector<std::string>{"hello", "comm.ready", "beat", "bye"});
  }
  auto ready = agent.received_of_type("comm.ready");
  REQUIRE(ready.size() == 2);
  for (const auto& message : ready) {
    if (message.rank == 1) CHECK(message.msg["ms"] == 1234);
    if (message.rank == 0) CHECK(message.msg["ms"].get<int>() >= 50);  // the fake init's sleep
  }
}

TEST_CASE("python client: a beat carries torch.cuda.max_memory_allocated() once CUDA is initialised, and never initialises it") {
  FakeAgent agent;
  // A stand-in torch.cuda whose figure may not be read before CUDA is "initialised": no PyTorch, no GPU.
  write_stand_in_torch(agent.dir(), {{"__init__.py", "from . import cuda\n"}, {"cuda.py", R"(
initialised = False
def is_initialized():
    return initialised
def max_memory_allocated(device=None):
    assert initialised, "read before CUDA was initialised"
    return 5 << 30
)"}});
  std::string script = agent.dir() + "/train.py";
  std::ofstream(script) << kBothPaths << R"(
import torch
from dtrain_worker import Worker
w = Worker.from_env()
w.beat(1, loss=1.0)                      # CPU so far: no figure
torch.cuda.initialised = True
w.beat(2, loss=0.5)                      # torch's figure
w.beat(3, final=True, peak_memory_bytes=7)  # the script's own figure wins
w.close()
)";
  agent.spawn(1, {"/usr/bin/python3", script, DTRAIN_SOURCE_DIR "/worker/python", agent.dir()},
              {{"DTRAIN_HEARTBEAT_INTERVAL_MS", "0"}});
  REQUIRE_MESSAGE(agent.wait_all_ok(60s), agent.log(0));
  std::map<int64_t, nlohmann::json> by_step;
  for (const auto& beat : agent.received_of_type("beat")) by_step[beat.msg["step"].get<int64_t>()] = beat.msg;
  REQUIRE(by_step.size() == 3);
  CHECK_FALSE(by_step[1].contains("peak_memory_bytes"));
  CHECK(by_step[2]["peak_memory_bytes"] == int64_t{5} << 30);
  CHECK(by_step[3]["peak_memory_bytes"] == 7);
}

TEST_CASE("python client: DtrainStore keeps bytes, adds atomically across ranks, and names what it cannot do") {
  dtrain::testing::require_python_module("torch.distributed");
  FakeAgent agent;
  std::string script = agent.dir() + "/store.py";
  std::ofstream(script) << R"(
import sys
from datetime import timedelta
sys.path.insert(0, sys.argv[1])
from dtrain_worker import Worker, DtrainError, DtrainStore
import torch.distributed as dist
w = Worker.from_env()
store = w.store()
assert isinstance(store, dist.Store) and isinstance(store, DtrainStore)
assert store is w.store()
blob = bytes(range(256))
store.set("blob/%d" % w.rank, blob)
for peer in range(w.world_size):
    assert store.get("blob/%d" % peer) == blob  # get() waits for a peer's key
# Through torch's own C++ wrapper: the trampoline reaches our methods.
prefixed = dist.PrefixStore("pre", store)
prefixed.set("text", "plain")
assert prefixed.get("text") == b"plain"
tickets = [store.add("count", 1) for _ in range(5)]
assert tickets == sorted(set(tickets)), tickets  # atomic: each add returns a new total
store.set("tickets/%d" % w.rank, ",".join(map(str, tickets)))
store.wait(["tickets/%d" % peer for peer in range(w.world_size)], timedelta(seconds=20))
assert store.add("count", 0) == 5 * w.world_size, store.add("count", 0)
every = [int(t) for peer in range(w.world_size) for t in store.get("tickets/%d" % peer).decode().split(",")]
assert sorted(every) == list(range(1, 5 * w.world_size + 1)), every  # no ticket handed out twice
try:
    store.wait(["never"], timedelta(milliseconds=200))
    raise SystemExit("wait should have timed out")
except DtrainError as error:
    assert "never" in str(error), error
try:
    prefixed.compare_set("text", "plain", "other")
    raise SystemExit("compare_set should be refused")
except Exception as error:
    assert "compare-and-set" in str(error), error
try:
    w.init_process_group(backend="gloo", use_dtrain_store=True, init_method="env://")
    raise SystemExit("init_method with use_dtrain_store should be refused")
except DtrainError as error:
    assert "init_method='env://'" in str(error), error
w.close()
print("store checks done")
)";
  agent.spawn(3, {"/usr/bin/python3", script, DTRAIN_SOURCE_DIR "/worker/python"});
  REQUIRE_MESSAGE(agent.wait_all_ok(120s), agent.log(0) << agent.log(1) << agent.log(2));
  for (int rank = 0; rank < 3; ++rank) CHECK(agent.log(rank).find("store checks done") != std::string::npos);
}

TEST_CASE("python client: JSON true is no generation and no step (Python counts bool as int)") {
  // The script plays the agent on its own socket: gen.changed {gen: true} would have been
  // generation 1 (newer than DTRAIN_GENERATION=0), ckpt.request {step: true} step 1.
  dtrain::testing::TempDir dir;
  std::string script = dir.path() + "/bools.py";
  std::ofstream(script) << R"(
import json, os, socket, sys, threading, time
sys.path.insert(0, sys.argv[1])
path = os.path.join(sys.argv[2], "agent.sock")
server = socket.socket(socket.AF_UNIX)
server.bind(path)
server.listen(1)
os.environ.update({"DTRAIN_AGENT_SOCKET": path, "RANK": "0", "WORLD_SIZE": "1", "DTRAIN_GENERATION": "0"})
valid_sent = threading.Event()
def agent():
    conn, _ = server.accept()
    lines = conn.makefile("rb")
    assert json.loads(lines.readline())["type"] == "hello"
    conn.sendall(b'{"type":"gen.changed","gen":true}\n{"type":"ckpt.request","step":true,"reason":"r"}\n')
    valid_sent.wait(10)
    conn.sendall(b'{"type":"gen.changed","gen":3}\n')
    while lines.readline():
        pass
threading.Thread(target=agent, daemon=True).start()
import dtrain_worker
w = dtrain_worker.Worker.from_env()
deadline = time.monotonic() + 10
while not w.checkpoint_requested(0):  # step true is taken as 0: a request due now
    assert time.monotonic() < deadline, "ckpt.request {step: true} never became a request at step 0"
    time.sleep(0.01)
assert w.checkpoint_reason == "r"
assert w.generation_changed() is None, w.generation_changed()
valid_sent.set()
while w.generation_changed() is None:
    assert time.monotonic() < deadline, "gen.changed {gen: 3} never noticed"
    time.sleep(0.01)
assert w.generation_changed() == 3 and type(w.generation_changed()) is int
w.close()
print("ok")
)";
  std::string command = "timeout 60 /usr/bin/python3 '" + script + "' '" DTRAIN_SOURCE_DIR "/worker/python' '" +
                        dir.path() + "' > '" + dir.path() + "/out' 2>&1";
  int status = std::system(command.c_str());
  std::string out = dtrain::testing::read_text(dir.path() + "/out");
  CHECK_MESSAGE(status == 0, out);
  CHECK(out.find("ok") != std::string::npos);
}
