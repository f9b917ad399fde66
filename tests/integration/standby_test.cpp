// Warm standbys (elastic.standby_per_host) end to end, on the embedded localhost default with the
// reference trainer: the agent keeps a started-but-unassigned dtrain-train waiting on its socket;
// an in-place recovery's replacement is that process taking the lost rank (assign), not a new
// one, and the pool is refilled. The run ends bit-identical to an uninterrupted one and nothing
// of it, standbys included, survives.

#include <doctest/doctest.h>

#include <signal.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <regex>

#include "tests/integration/dtrain_runner.h"
#include "tests/skip.h"

using namespace dtrain::testing;

namespace {

std::string trainer_spec(const std::string& name, int steps, bool in_place, int standby) {
  std::string elastic = "{max_restarts: 2";
  if (in_place) elastic += ", in_place: true";
  if (standby > 0) elastic += ", standby_per_host: " + std::to_string(standby);
  return "version: 1\nname: " + name + "\nslots_per_host: 4\n"
         "worker:\n  command: [dtrain-train, --steps, \"" + std::to_string(steps) +
         "\", --log-every, \"50\", --layers, \"2\"]\n  backend: gloo\n"
         "batch: {global: 32, micro: 8}\n"
         "checkpoint: {interval_steps: 50, keep: 3}\n"
         "heartbeat: {interval: 200ms, timeout: 2s, hang_timeout: 3s}\n"
         "elastic: " + elastic + "}\n"
         "stop_grace: 2s\n";
}

/// The standbys of a run: its processes that were started as one (their /proc environ keeps
/// DTRAIN_STANDBY=1 even after an assign, which sets the variables inside the process only).
std::vector<pid_t> standbys_of_run(const std::string& run_id) {
  std::vector<pid_t> of_run = processes_of_run(run_id);
  std::vector<pid_t> standbys;
  for (pid_t pid : dtrain::test::processes_with_env("DTRAIN_STANDBY", "1")) {
    if (std::find(of_run.begin(), of_run.end(), pid) != of_run.end()) standbys.push_back(pid);
  }
  std::sort(standbys.begin(), standbys.end());
  return standbys;
}

// argv: worker/python dir, steps. Imports torch and builds the model BEFORE from_env(): that is
// what a standby has done when its rank comes. Pure data parallelism through
// dtrain_worker.InPlace; every rank ends with "final rank R params <sha1 of the parameters>".
const char* kPythonScript = R"(
import hashlib, sys, time
sys.path.insert(0, sys.argv[1])
import torch, torch.nn as nn
import dtrain_worker
torch.set_num_threads(1)
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
w = dtrain_worker.Worker.from_env()
trainer = dtrain_worker.InPlace(w, model, optimizer)
trainer.init_process_group(backend="gloo")
ddp = trainer.wrap(model)

def train_step(step):
    inputs = torch.randn(8, 16, generator=torch.Generator().manual_seed(step * w.world_size + w.rank))
    optimizer.zero_grad()
    loss = ddp(inputs).pow(2).mean()
    loss.backward()
    optimizer.step()
    w.beat(step, loss=loss.item())
    time.sleep(0.02)
    return loss.item()

trainer.run(train_step, 1, int(sys.argv[2]))
digest = hashlib.sha1(b"".join(p.detach().numpy().tobytes() for p in model.parameters())).hexdigest()
print("final rank %d params %s" % (w.rank, digest), flush=True)
w.close()
)";

std::string python_spec(const std::string& name, const std::string& script, int standby) {
  return "version: 1\nname: " + name + "\nslots_per_host: 4\n"
         "worker:\n  command: [/usr/bin/python3, \"" + script + "\", \"" DTRAIN_SOURCE_DIR "/worker/python\", \"120\"]\n"
         "  backend: gloo\n"
         // Generous: four ranks (and a standby) import torch at once on a small, shared machine.
         "heartbeat: {interval: 200ms, timeout: 5s, hang_timeout: 60s}\n"
         "elastic: {max_restarts: 2, in_place: true, in_place_timeout: 60s, standby_per_host: " +
         std::to_string(standby) + "}\nstop_grace: 2s\n";
}

std::vector<std::string> python_params(const std::string& dir) {
  std::vector<std::string> params;
  for (int rank = 0; rank < 4; ++rank) {
    std::string log = read_text(dir + "/ranks/" + std::to_string(rank) + ".log");
    std::smatch found;
    std::regex line("final rank " + std::to_string(rank) + " params ([0-9a-f]+)");
    params.push_back(std::regex_search(log, found, line) ? found[1].str() : "");
  }
  return params;
}

/// Once rank 0 of the run in `dir` has logged `step` (dtrain-train's log lines; state.json's
/// step by `step_from_state`): the run's one standby (0 when there is not exactly one), after
/// which rank `victim` is SIGKILLed.
pid_t kill_rank_beside_standby(const std::string& dir, int64_t step, int victim, int timeout_ms,
                               bool step_from_state = false) {
  REQUIRE(!dir.empty());
  REQUIRE(wait_until([&] { return (step_from_state ? rank_field(dir, 0, "step") : rank_logged_step(dir, 0)) >= step; },
                     timeout_ms));
  std::vector<pid_t> standbys = standbys_of_run(run_id_of(dir));
  REQUIRE(standbys.size() == 1);
  int pid = started_pid(dir, victim);
  REQUIRE(pid > 0);
  CHECK(pid != standbys[0]);
  REQUIRE(::kill(pid, SIGKILL) == 0);
  return standbys[0];
}

/// The one recovery was in place, lost no step, and its replacement was `standby` taking the rank.
void check_standby_took_rank(const std::vector<nlohmann::json>& events, int victim, pid_t standby) {
  auto completed = events_named(events, "recovery.completed");
  REQUIRE(completed.size() == 1);
  CHECK(completed[0]["action"] == "in-place");
  CHECK(completed[0]["steps_lost"] == 0);
  CHECK(events_named(events, "recovery.fallback").empty());
  auto started = events_named(events, "worker.started");
  REQUIRE(started.size() == 5u);
  CHECK(started.back()["rank"] == victim);
  CHECK(started.back()["gen"] == 1);
  CHECK(started.back()["pid"] == standby);
}

void report_phases(const char* what, const std::vector<nlohmann::json>& events) {
  for (const auto& completed : events_named(events, "recovery.completed")) {
    std::printf("standby_test: %s: recovery.completed %s\n", what, completed.dump().c_str());
  }
}

}  // namespace

TEST_CASE("standby: kill -9 of one of 4 ranks is replaced by the warm standby taking the rank, same final parameters") {
  constexpr int kSteps = 1000;  // long enough after the kill (step 80) for the refill, a second after the assign
  std::vector<std::string> expected;
  {
    DtrainEnv env;
    DtrainProcess reference = env.run({"submit", env.write_spec("ref.yaml", trainer_spec("ref", kSteps, false, 0))});
    REQUIRE(reference.exit_code == 0);
    expected = ranks_final_lines(env.run_dirs().at(0), 4);
    for (const std::string& line : expected) REQUIRE(!line.empty());
  }

  DtrainEnv env;
  DtrainProcess run = env.start({"submit", env.write_spec("standby.yaml", trainer_spec("standby", kSteps, true, 1))});
  std::string dir = only_run_dir(env);
  std::string run_id = run_id_of(dir);
  pid_t standby = kill_rank_beside_standby(dir, 50, 2, 60000);
  // The pool is refilled while the run goes on: a second process started as a standby.
  bool refilled = wait_until([&] {
    std::vector<pid_t> now = standbys_of_run(run_id);
    return std::any_of(now.begin(), now.end(), [&](pid_t pid) { return pid != standby; });
  }, 60000);
  CHECK(refilled);
  REQUIRE(run.wait(120000));
  CHECK(run.exit_code == 0);

  auto events = read_events(dir + "/events.jsonl");
  report_phases("with a standby", events);
  check_standby_took_rank(events, 2, standby);
  // The assigned standby writes the rank's log as that rank.
  CHECK(read_text(dir + "/ranks/2.log").find("dtrain-train: final") != std::string::npos);
  CHECK(ranks_final_lines(dir, 4) == expected);
  check_nothing_left(run_id);
  CHECK(process_gone(standby));
}

TEST_CASE("standby: without a standby the same recovery starts a new process (phases for comparison)") {
  DtrainEnv env;
  DtrainProcess run = env.start({"submit", env.write_spec("cold.yaml", trainer_spec("cold", 300, true, 0))});
  std::string dir = only_run_dir(env);
  REQUIRE(!dir.empty());
  std::string run_id = run_id_of(dir);
  REQUIRE(wait_until([&] { return rank_logged_step(dir, 0) >= 50; }, 60000));
  CHECK(standbys_of_run(run_id).empty());
  int victim = started_pid(dir, 2);
  REQUIRE(victim > 0);
  REQUIRE(::kill(victim, SIGKILL) == 0);
  REQUIRE(run.wait(120000));
  CHECK(run.exit_code == 0);
  auto events = read_events(dir + "/events.jsonl");
  report_phases("without a standby", events);
  auto completed = events_named(events, "recovery.completed");
  REQUIRE(completed.size() == 1);
  CHECK(completed[0]["action"] == "in-place");
  check_nothing_left(run_id);
}

TEST_CASE("standby: a Python DDP script's standby (torch imported, model built) takes the killed rank, same parameters") {
  if (std::system("/usr/bin/python3 -c 'import torch.distributed' >/dev/null 2>&1") != 0) {
    skip_test("/usr/bin/python3 cannot import torch.distributed (apt-get install python3-torch)");
  }
  std::vector<std::string> expected;
  {
    DtrainEnv env;
    std::string script = env.dir.path + "/train.py";
    write_text(script, kPythonScript);
    DtrainProcess reference = env.run({"submit", env.write_spec("ref.yaml", python_spec("ref", script, 0))}, 240000);
    REQUIRE(reference.exit_code == 0);
    expected = python_params(env.run_dirs().at(0));
    REQUIRE(!expected[0].empty());
  }

  DtrainEnv env;
  std::string script = env.dir.path + "/train.py";
  write_text(script, kPythonScript);
  DtrainProcess run = env.start({"submit", env.write_spec("warm.yaml", python_spec("warm", script, 1))});
  std::string dir = only_run_dir(env);
  pid_t standby = kill_rank_beside_standby(dir, 40, 1, 180000, /*step_from_state=*/true);
  bool ended = run.wait(240000);
  INFO("stderr:\n" << run.err() << "\nrank 1 log:\n" << read_text(dir + "/ranks/1.log"));
  REQUIRE(ended);
  CHECK(run.exit_code == 0);

  auto events = read_events(dir + "/events.jsonl");
  report_phases("python, with a standby", events);
  check_standby_took_rank(events, 1, standby);
  CHECK(python_params(dir) == std::vector<std::string>(4, expected[0]));
  check_nothing_left(run_id_of(dir));
}
