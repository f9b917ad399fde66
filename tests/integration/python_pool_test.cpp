// The pool of an unmodified script (worker.pool, issue 28 item 3), end to end with python3-torch:
// the agent keeps processes of the worker command waiting in the bootstrap with torch imported;
// a generation's ranks are those processes taking their rank (same pids, torch already in
// sys.modules when the script starts), with the new generation's environment; an uncaught
// exception of a rank that came from the pool is still that rank's error record, the root cause.
// Nothing of the run, pool processes included, survives it.

#include <doctest/doctest.h>

#include <signal.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <regex>
#include <set>

#include "tests/integration/dtrain_runner.h"
#include "tests/skip.h"

using namespace dtrain::testing;

namespace {

// Unmodified: no dtrain import. It prints what it found at its start, then trains DDP (gloo).
// Generation 0 trains until it is killed; in generation 1 rank 2 fails of an uncaught ValueError.
const char* kScript = R"(import os, sys, time
preloaded = 'torch' in sys.modules
import torch, torch.distributed as dist
print('start rank %s gen %s pid %d preloaded %s world %s port %s standby %s' % (
    os.environ['RANK'], os.environ['DTRAIN_GENERATION'], os.getpid(), preloaded,
    os.environ['WORLD_SIZE'], os.environ['MASTER_PORT'], os.environ.get('DTRAIN_STANDBY')), flush=True)
dist.init_process_group('gloo')
torch.manual_seed(0)
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(16, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
generation = int(os.environ['DTRAIN_GENERATION'])
def check_batch(step):
    if generation == 1 and os.environ['RANK'] == '2' and step == 20:
        raise ValueError('bad batch in a rank from the pool')
for step in range(3000):
    check_batch(step)
    opt.zero_grad()
    model(torch.randn(8, 16)).pow(2).mean().backward()
    opt.step()
    time.sleep(0.05)
)";

/// The run's pool processes that are ready: started as one (their /proc environ keeps
/// DTRAIN_STANDBY=bootstrap after an assign, which sets variables inside the process only), not
/// assigned (`assigned`), with torch's library mapped and a socket open, which the bootstrap opens
/// only after its imports, right before its hello.
std::set<pid_t> ready_pool(const std::string& run_id, const std::set<pid_t>& assigned) {
  std::vector<pid_t> of_run = processes_of_run(run_id);
  std::set<pid_t> ready;
  for (pid_t pid : dtrain::test::processes_with_env("DTRAIN_STANDBY", "bootstrap")) {
    if (std::find(of_run.begin(), of_run.end(), pid) == of_run.end() || assigned.count(pid)) continue;
    std::string proc = "/proc/" + std::to_string(pid);
    if (read_text(proc + "/maps").find("libtorch") == std::string::npos) continue;
    std::error_code error;
    bool socket = false;
    for (const auto& fd : std::filesystem::directory_iterator(proc + "/fd", error)) {
      socket = socket || std::filesystem::read_symlink(fd.path(), error).string().rfind("socket:", 0) == 0;
    }
    if (socket) ready.insert(pid);
  }
  return ready;
}

struct StartLine {
  int rank = -1;
  int gen = -1;
  pid_t pid = 0;
  bool preloaded = false;
  int world = 0;
  std::string port;
  std::string standby;
};

std::vector<StartLine> start_lines(const std::string& dir) {
  std::vector<StartLine> lines;
  std::regex pattern(R"(start rank (\d+) gen (\d+) pid (\d+) preloaded (\w+) world (\d+) port (\d+) standby (\w+))");
  for (int rank = 0; rank < 4; ++rank) {
    std::string log = read_text(dir + "/ranks/" + std::to_string(rank) + ".log");
    for (std::sregex_iterator it(log.begin(), log.end(), pattern), end; it != end; ++it) {
      const std::smatch& m = *it;
      lines.push_back({std::stoi(m[1]), std::stoi(m[2]), static_cast<pid_t>(std::stoi(m[3])), m[4] == "True",
                       std::stoi(m[5]), m[6], m[7]});
    }
  }
  return lines;
}

}  // namespace

TEST_CASE("pool: after kill -9 of 1 of 4 ranks of an unmodified torch script every rank is a pool process taking it, with its env and error record") {
  require_python_module("torch.distributed");
  DtrainEnv env;
  std::string script = env.dir.path + "/pool.py";
  write_text(script, kScript);
  DtrainProcess run = env.start(
      {"submit", env.write_spec("pool.yaml", "version: 1\nname: pool\nslots_per_host: 4\n"
                                             "worker:\n  command: [/usr/bin/python3, '" + script + "']\n"
                                             "  pool: {per_host: 4}\n"
                                             "elastic: {max_restarts: 1}\n"
                                             // Generous: eight processes import torch on a small, shared machine.
                                             "heartbeat: {interval: 200ms, timeout: 5s, hang_timeout: 60s}\n"
                                             "stop_grace: 2s\n")});
  std::string dir = only_run_dir(env);
  REQUIRE(!dir.empty());
  std::string run_id = run_id_of(dir);
  // The first generation starts as new processes (nothing is ready yet); the pool fills once
  // every rank has beaten.
  REQUIRE(wait_until([&] { return rank_field(dir, 3, "step") >= 5; }, 120000));
  std::set<pid_t> first_ranks;
  for (int rank = 0; rank < 4; ++rank) first_ranks.insert(rank_pid(dir, rank));
  std::set<pid_t> pool;
  REQUIRE(wait_until([&] { return (pool = ready_pool(run_id, first_ranks)).size() == 4; }, 120000));
  int victim = rank_pid(dir, 1);
  REQUIRE(victim > 0);
  REQUIRE(::kill(victim, SIGKILL) == 0);
  REQUIRE(run.wait(180000));
  INFO("stderr:\n" << run.err());
  CHECK(run.exit_code == 1);  // generation 1's rank 2 fails and max_restarts is spent

  // Generation 1: every rank a process of the pool that was ready before the kill.
  auto events = read_events(dir + "/events.jsonl");
  std::map<int, pid_t> second;
  for (const auto& started : events_named(events, "worker.started")) {
    if (started["gen"] == 1) second[started["rank"].get<int>()] = started["pid"].get<pid_t>();
  }
  REQUIRE(second.size() == 4u);
  for (const auto& [rank, pid] : second) {
    INFO("rank " << rank << " pid " << pid);
    CHECK(pool.count(pid) == 1);
  }
  // What each script saw at its start: torch imported before (only in the pool), the rank's
  // environment of its generation, no standby variable left.
  std::vector<StartLine> lines = start_lines(dir);
  std::set<std::string> ports[2];
  int seen[2] = {0, 0};
  for (const StartLine& line : lines) {
    INFO("rank " << line.rank << " gen " << line.gen << " pid " << line.pid);
    REQUIRE((line.gen == 0 || line.gen == 1));
    ++seen[line.gen];
    CHECK(line.preloaded == (line.gen == 1));
    CHECK(line.world == 4);
    CHECK(line.standby == "None");
    ports[line.gen].insert(line.port);
    if (line.gen == 1) CHECK(second[line.rank] == line.pid);
  }
  CHECK(seen[0] == 4);
  CHECK(seen[1] == 4);
  CHECK(ports[0].size() == 1);  // one MASTER_PORT per generation, every rank the same
  CHECK(ports[1].size() == 1);

  // The pool rank's uncaught exception is its root cause, from its own error file.
  nlohmann::json cause = nlohmann::json::parse(read_text(dir + "/state.json"))["root_cause"];
  CHECK(cause["rank"] == 2);
  CHECK(cause["message"] == "ValueError: bad batch in a rank from the pool");
  CHECK(cause.value("traceback", "").find("pool.py\", line 14, in check_batch") != std::string::npos);
  check_nothing_left(run_id);
}
