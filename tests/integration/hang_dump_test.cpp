// Hang evidence for NCCL jobs, end to end on localhost: workers get NCCL_DEBUG and PyTorch's
// flight-recorder variables, and on a hang verdict the agent writes to each rank's debug-info
// pipe and ships the dump it answers with into the run directory, next to the stack sample. The
// workers are fakes of PyTorch's side (a fifo read without blocking, a dump written when it has
// data): rank 0 makes the pipe, rank 1 does not and costs no dump.

#include <doctest/doctest.h>
#include <unistd.h>

#include "tests/integration/dtrain_runner.h"
#include "tests/skip.h"

using namespace dtrain::testing;

namespace {

const char* kFakeTorchWorker = R"PY(
import os, sys, time
sys.path.insert(0, os.environ["DTRAIN_SOURCE_DIR"] + "/worker/python")
from dtrain_worker import Worker
rank = os.environ["RANK"]
with open(os.environ["ENV_DUMP"] + rank, "w") as out:
    for name in ("NCCL_DEBUG", "TORCH_NCCL_TRACE_BUFFER_SIZE", "TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_DUMP_ON_TIMEOUT",
                 "TORCH_NCCL_DEBUG_INFO_TEMP_FILE", "TORCH_NCCL_DEBUG_INFO_PIPE_FILE", "TORCH_FR_DUMP_TEMP_FILE",
                 "TORCH_FR_DEBUG_INFO_PIPE_FILE"):
        out.write("%s=%s\n" % (name, os.environ.get(name, "")))
w = Worker.from_env()
if w.generation > 0:
    w.beat(1, final=True)
    w.close()
    sys.exit(0)
pipe = None
if rank == "0":  # as PyTorch's DumpPipe: unlink, mkfifo, open O_RDONLY|O_NONBLOCK
    path = os.environ["TORCH_NCCL_DEBUG_INFO_PIPE_FILE"] + rank + ".pipe"
    if os.path.exists(path):
        os.unlink(path)
    os.mkfifo(path, 0o666)
    pipe = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
for step in range(1, 4):
    w.beat(step, final=True)
while True:  # hung: no step progress; rank 0 still answers its pipe, as the watchdog does
    time.sleep(0.05)
    if pipe is None:
        continue
    try:
        data = os.read(pipe, 128)
    except BlockingIOError:
        data = b""
    if data:
        with open(os.environ["TORCH_NCCL_DEBUG_INFO_TEMP_FILE"] + rank, "wb") as dump:
            dump.write(b"\x80\x04fake flight recorder of rank " + rank.encode() + b"\x00\xff.")
)PY";

}  // namespace

TEST_CASE("a hung generation's ranks with a debug-info pipe leave their flight-recorder dump in the run directory") {
  if (::access("/usr/bin/python3", X_OK) != 0) dtrain::testing::skip_test("the fake PyTorch worker needs /usr/bin/python3");
  DtrainEnv env;
  std::string script = env.dir.path + "/fake_torch_worker.py";
  write_text(script, kFakeTorchWorker);
  std::string env_dump = env.dir.path + "/env-rank";
  std::string spec = env.write_spec(
      "hang.yaml", "version: 1\nname: hang\nslots_per_host: 2\nworker:\n  command: [/usr/bin/python3, " + script +
                       "]\n  env: {DTRAIN_SOURCE_DIR: " + std::string(DTRAIN_SOURCE_DIR) + ", ENV_DUMP: " + env_dump +
                       ", TORCH_FR_BUFFER_SIZE: '500'}\n"
                       "heartbeat: {interval: 200ms, timeout: 2s, hang_timeout: 3s}\nstop_grace: 1s\n"
                       "elastic: {max_restarts: 2}\n");
  DtrainProcess run = env.run({"submit", spec}, 120'000);
  CHECK(run.exit_code == 0);
  REQUIRE(env.run_dirs().size() == 1);
  std::string dir = env.run_dirs()[0];
  auto events = read_events(dir + "/events.jsonl");
  REQUIRE(events_named(events, "worker.hang").size() == 1);

  auto dumps = events_named(events, "hang.dump");
  REQUIRE(dumps.size() == 1);  // rank 1 has no pipe: no dump, no event
  CHECK(dumps[0]["rank"] == 0);
  CHECK(dumps[0]["gen"] == 0);
  CHECK(dumps[0]["host"] == "localhost");
  CHECK_FALSE(dumps[0].contains("error"));
  std::string path = dumps[0].value("path", "");
  CHECK(path == dir + "/samples/gen0-rank0.flight-recorder");
  std::string dump = read_text(path);
  CHECK(dump == std::string("\x80\x04" "fake flight recorder of rank 0\x00\xff.", 35));
  CHECK(dumps[0]["bytes"] == dump.size());
  CHECK(events_named(events, "worker.sample").size() == 1);  // the stack sample is still taken

  // The environment the fake saw: dtrain's defaults, and the spec's own value where it set one.
  std::string seen = read_text(env_dump + "1");
  CHECK(seen.find("NCCL_DEBUG=WARN\n") != std::string::npos);
  CHECK(seen.find("TORCH_NCCL_TRACE_BUFFER_SIZE=2000\n") != std::string::npos);
  CHECK(seen.find("TORCH_FR_BUFFER_SIZE=500\n") != std::string::npos);
  CHECK(seen.find("TORCH_NCCL_DUMP_ON_TIMEOUT=1\n") != std::string::npos);
  CHECK(seen.find("TORCH_NCCL_DEBUG_INFO_PIPE_FILE=/") != std::string::npos);
  CHECK(seen.find("-rank\nTORCH_FR_DUMP_TEMP_FILE=") != std::string::npos);
  check_nothing_left(run_id_of(dir));
}
