// The store's reply limit under a real `dtrain submit` (issue 26): two Python workers on two
// hosts with an agent each (localhost and 127.0.0.1: both local, two agents)
// (worker/python/dtrain_worker.py, stdlib only) store 20 values of 1,000,000 bytes and each asks
// for all of them in one kv.wait, a 20 MB reply. Before, that reply went out in one frame over
// the 8 MiB frame limit: the agent dropped the stream and fenced its host. Now each requester
// gets an error naming the size and the limit, a kv.get of one value still works (what a worker
// can store, it can read back), the ranks meet again through the store, and the run succeeds
// with no host lost and no agent error.
#include <doctest/doctest.h>

#include <regex>
#include <string>

#include "tests/integration/dtrain_runner.h"
#include "worker/contract/wire.h"

using namespace dtrain::testing;

namespace {

// argv[1]: worker/python. Rank 1 asks first (its wait is likely pending when the last value
// arrives), rank 0 after publishing (answered at once): both paths end in the same error.
const char* kScript = R"(
import sys
sys.path.insert(0, sys.argv[1])
from dtrain_worker import Worker, DtrainError
w = Worker.from_env()
big = "f" * 1000000
keys = ["big/%d" % i for i in range(20)]
if w.rank == 0:
    w.kv_wait(["rank1/asking"], timeout=60)
    for key in keys:
        w.kv_set(key, big)
else:
    w.kv_set("rank1/asking", "1")
try:
    values = w.kv_wait(keys, timeout=60)
    print("rank %d: UNEXPECTED reply of %d values" % (w.rank, len(values)), flush=True)
    sys.exit(3)
except DtrainError as error:
    print("rank %d refused: %s" % (w.rank, error), flush=True)
assert w.kv_get(keys[7]) == big
w.kv_set("after/%d" % w.rank, "1")
w.kv_wait(["after/%d" % r for r in range(w.world_size)], timeout=60)
print("rank %d: store ok after the refusal" % w.rank, flush=True)
w.close()
)";

}  // namespace

TEST_CASE("store limits: a kv.wait for 20 MB gets an error naming the size and the limit, and every host goes on") {
  DtrainEnv env;
  std::string script = env.dir.path + "/big_wait.py";
  write_text(script, kScript);
  std::string spec = env.write_spec(
      "big.yaml", "version: 1\nname: bigwait\nhosts: [localhost, 127.0.0.1]\nslots_per_host: 1\nworker:\n  command: [/usr/bin/python3, \"" + script +
                      "\", \"" DTRAIN_SOURCE_DIR "/worker/python\"]\n"
                      "heartbeat: {interval: 200ms, timeout: 5s, hang_timeout: 60s}\nstop_grace: 2s\n");
  DtrainProcess run = env.run({"submit", spec}, 180'000);
  REQUIRE(env.run_dirs().size() == 1);
  std::string dir = env.run_dirs()[0];
  INFO("rank 0 log:\n" << read_text(dir + "/ranks/0.log") << "\nrank 1 log:\n" << read_text(dir + "/ranks/1.log")
                       << "\nstderr:\n" << run.err());
  CHECK(run.exit_code == 0);
  const std::regex refused("rank (\\d) refused: kv\\.wait: reply would be (\\d+) bytes, over the " +
                           std::to_string(dtrain::contract::wire::kMaxLineBytes) +
                           " limit; wait for fewer keys or store smaller values");
  for (int rank = 0; rank < 2; ++rank) {
    CAPTURE(rank);
    std::string log = read_text(dir + "/ranks/" + std::to_string(rank) + ".log");
    std::smatch match;
    REQUIRE(std::regex_search(log, match, refused));
    CHECK(match[1] == std::to_string(rank));
    CHECK(std::stoll(match[2]) > 20'000'000);
    CHECK(log.find("rank " + std::to_string(rank) + ": store ok after the refusal") != std::string::npos);
  }
  auto events = read_events(dir + "/events.jsonl");
  CHECK(events_named(events, "host.connected").size() == 2);
  for (const char* name : {"host.lost", "host.failed", "agent.error", "protocol.error", "failure.detected"}) {
    CAPTURE(name);
    CHECK(events_named(events, name).empty());
  }
  auto finished = events_named(events, "run.finished");
  REQUIRE(finished.size() == 1);
  CHECK(finished[0]["state"] == "succeeded");
  check_nothing_left(run_id_of(dir));
}
