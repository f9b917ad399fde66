// PyTorch's Gloo rendezvous through dtrain's KV store (dtrain_worker.DtrainStore) under a real
// `dtrain submit`: no TCPStore and no MASTER_PORT (the script deletes MASTER_ADDR/MASTER_PORT
// before init, so env:// could not work), an allreduce that ends with the same tensor on every
// rank, and after a kill -9 of one rank the restarted generation rendezvouses on fresh keys.
// Skipped, with a message, when /usr/bin/python3 cannot import torch.distributed.
#include <doctest/doctest.h>

#include <cstdlib>
#include <regex>
#include <string>

#include "tests/integration/dtrain_runner.h"
#include "tests/skip.h"

using namespace dtrain::testing;

namespace {

bool torch_available() {
  return std::system("/usr/bin/python3 -c 'import torch.distributed' >/dev/null 2>&1") == 0;
}

// argv: worker/python dir. Each rank adds rank+1 to a 4-element tensor; every rank prints the
// result with its generation. In generation 0, with KILL_RANK set, that rank SIGKILLs itself
// after the allreduce and the others wait to be stopped by the supervisor.
const char* kScript = R"(
import os, signal, sys, time
sys.path.insert(0, sys.argv[1])
for name in ("MASTER_ADDR", "MASTER_PORT"):
    os.environ.pop(name, None)  # env:// would fail: the rendezvous must use the dtrain store
import torch
import torch.distributed as dist
from datetime import timedelta
from dtrain_worker import Worker
w = Worker.from_env()
w.init_process_group(backend="gloo", use_dtrain_store=True, timeout=timedelta(seconds=60))
assert dist.get_rank() == w.rank and dist.get_world_size() == w.world_size
store = w.store()
store.add("arrived", 1)
dist.barrier()
arrived = store.add("arrived", 0)
assert arrived == w.world_size, arrived
if w.rank == 0:
    store.set("greeting", b"\x00hello\xff")
assert store.get("greeting") == b"\x00hello\xff"
tensor = torch.arange(4, dtype=torch.float32) + float(w.rank + 1)
dist.all_reduce(tensor)
print("allreduce gen=%d rank=%d value=%s" % (w.generation, w.rank, tensor.tolist()), flush=True)
kill_rank = int(os.environ.get("KILL_RANK", "-1"))
if w.generation == 0 and kill_rank >= 0:
    if w.rank == kill_rank:
        os.kill(os.getpid(), signal.SIGKILL)
    while True:
        time.sleep(1)  # until the supervisor stops this generation
dist.destroy_process_group()
w.close()
)";

/// `worker_extra`: more lines of the worker: block; `extra`: more top-level lines.
std::string spec_yaml(const std::string& name, int ranks, const std::string& script,
                      const std::string& worker_extra, const std::string& extra) {
  return "version: 1\nname: " + name + "\nslots_per_host: " + std::to_string(ranks) +
         "\nworker:\n  command: [/usr/bin/python3, \"" + script + "\", \"" DTRAIN_SOURCE_DIR
         "/worker/python\"]\n  backend: gloo\n" + worker_extra +
         "heartbeat: {interval: 200ms, timeout: 5s, hang_timeout: 60s}\nstop_grace: 2s\n" + extra;
}

/// The value every rank of `generation` printed, as text ("[...]"), per rank; "" where missing.
std::vector<std::string> allreduce_values(const std::string& run_dir, int ranks, int generation) {
  std::vector<std::string> values;
  std::regex line("allreduce gen=" + std::to_string(generation) + " rank=(\\d+) value=(\\[[^\\]]*\\])");
  for (int rank = 0; rank < ranks; ++rank) {
    std::string log = read_text(run_dir + "/ranks/" + std::to_string(rank) + ".log");
    std::smatch match;
    values.push_back(std::regex_search(log, match, line) && match[1] == std::to_string(rank) ? match[2].str() : "");
  }
  return values;
}

/// sum over ranks r of (i + r + 1), for i = 0..3, as Python prints a list of floats.
std::string expected_value(int ranks) {
  std::string text = "[";
  for (int i = 0; i < 4; ++i) {
    int sum = 0;
    for (int rank = 0; rank < ranks; ++rank) sum += i + rank + 1;
    text += (i ? ", " : "") + std::to_string(sum) + ".0";
  }
  return text + "]";
}

void check_allreduce(int ranks) {
  DtrainEnv env;
  std::string script = env.dir.path + "/allreduce.py";
  write_text(script, kScript);
  DtrainProcess run = env.run({"submit", env.write_spec("store.yaml", spec_yaml("store", ranks, script, "", ""))}, 180000);
  REQUIRE(env.run_dirs().size() == 1);
  std::string dir = env.run_dirs()[0];
  INFO("rank 0 log:\n" << read_text(dir + "/ranks/0.log") << "\nstderr:\n" << run.err());
  CHECK(run.exit_code == 0);
  auto values = allreduce_values(dir, ranks, 0);
  for (int rank = 0; rank < ranks; ++rank) {
    CAPTURE(rank);
    CHECK(values[rank] == expected_value(ranks));
  }
  auto ready = events_named(read_events(dir + "/events.jsonl"), "failure.detected");
  CHECK(ready.empty());
  CHECK(processes_of_run(run_id_of(dir)).empty());
}

}  // namespace

TEST_CASE("python store: 2 Gloo ranks rendezvous through dtrain's store and allreduce alike") {
  if (!torch_available()) {
    dtrain::testing::skip_test("/usr/bin/python3 cannot import torch.distributed (apt-get install python3-torch)");
  }
  check_allreduce(2);
}

TEST_CASE("python store: 4 Gloo ranks rendezvous through dtrain's store and allreduce alike") {
  if (!torch_available()) {
    dtrain::testing::skip_test("/usr/bin/python3 cannot import torch.distributed (apt-get install python3-torch)");
  }
  check_allreduce(4);
}

TEST_CASE("python store: after kill -9 of one rank, generation 1 rendezvouses through the store again") {
  if (!torch_available()) {
    dtrain::testing::skip_test("/usr/bin/python3 cannot import torch.distributed (apt-get install python3-torch)");
  }
  DtrainEnv env;
  std::string script = env.dir.path + "/allreduce.py";
  write_text(script, kScript);
  std::string spec = env.write_spec(
      "restart.yaml", spec_yaml("restart", 2, script, "  env: {KILL_RANK: \"1\"}\n", "elastic: {max_restarts: 1}\n"));
  DtrainProcess run = env.run({"submit", spec}, 180000);
  REQUIRE(env.run_dirs().size() == 1);
  std::string dir = env.run_dirs()[0];
  INFO("rank 0 log:\n" << read_text(dir + "/ranks/0.log") << "\nrank 1 log:\n"
                       << read_text(dir + "/ranks/1.log") << "\nstderr:\n" << run.err());
  CHECK(run.exit_code == 0);
  auto events = read_events(dir + "/events.jsonl");
  auto detected = events_named(events, "failure.detected");
  REQUIRE(detected.size() == 1);
  CHECK(detected[0]["rank"] == 1);
  CHECK(detected[0]["signal"] == "SIGKILL");
  for (int generation : {0, 1}) {
    CAPTURE(generation);
    auto values = allreduce_values(dir, 2, generation);
    CHECK(values[0] == expected_value(2));
    CHECK(values[1] == expected_value(2));
  }
  CHECK(processes_of_run(run_id_of(dir)).empty());
}
