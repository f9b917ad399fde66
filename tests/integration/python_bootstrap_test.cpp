// Unmodified Python scripts under `dtrain submit` (issue 11, items 1 and 3): the agent's bootstrap
// (worker/python/bootstrap/sitecustomize.py, first on PYTHONPATH) turns optimizer steps into
// beats and uncaught exceptions into torchrun error records, which become the run's root cause,
// and splits each step's time into waiting for input and for communication (issue 28 item 6).
// Torch-free: a stand-in `torch` package (the shape of torch 1.13's torch.optim) proves the step
// hook; the tests with the real python3-torch skip where it is not installed.

#include <doctest/doctest.h>

#include <sys/stat.h>

#include <algorithm>
#include <vector>

#include "tests/integration/dtrain_runner.h"
#include "tests/skip.h"

using namespace dtrain::testing;

namespace {

std::string spec_for(const std::string& name, int slots, const std::string& script, const std::string& extra_worker = "") {
  return "version: 1\nname: " + name + "\nslots_per_host: " + std::to_string(slots) +
         "\nworker:\n  command: [/usr/bin/python3, '" + script + "']\n" + extra_worker +
         "heartbeat: {interval: 200ms, timeout: 3s, hang_timeout: 60s}\nstop_grace: 2s\n";
}

nlohmann::json state_of(const std::string& dir) { return nlohmann::json::parse(read_text(dir + "/state.json")); }

}  // namespace

TEST_CASE("bootstrap: an uncaught ValueError is the root cause, with its traceback, in events, state.json and the summary") {
  DtrainEnv env;
  std::string script = env.dir.path + "/train.py";
  write_text(script,
             "import os, time\n"
             "def load_batch():\n"
             "    raise ValueError('bad batch')\n"
             "if os.environ['RANK'] == '1':\n"
             "    load_batch()\n"
             "time.sleep(60)\n");
  DtrainProcess process = env.run({"submit", env.write_spec("bad.yaml", spec_for("bad", 2, script))});
  CHECK(process.exit_code == 1);
  std::string err = process.err();
  INFO("stderr:\n" << err);
  CHECK(err.find("root cause: rank 1 (local rank 1) on host localhost") != std::string::npos);
  CHECK(err.find("ValueError: bad batch") != std::string::npos);
  CHECK(err.find("train.py\", line 3, in load_batch") != std::string::npos);
  CHECK(err.find("last output:") != std::string::npos);  // the output tail stays as context

  std::string dir = env.run_dirs().at(0);
  nlohmann::json cause = state_of(dir)["root_cause"];
  CHECK(cause["rank"] == 1);
  CHECK(cause["message"] == "ValueError: bad batch");
  CHECK(cause["code"] == 1);
  CHECK(cause.value("traceback", "").find("train.py\", line 5, in <module>") != std::string::npos);
  auto events = read_events(dir + "/events.jsonl");
  auto detected = events_named(events, "failure.detected");
  REQUIRE(!detected.empty());
  CHECK(detected[0]["detail"] == "ValueError: bad batch");
  CHECK(detected[0].value("traceback", "").find("train.py\", line 3, in load_batch") != std::string::npos);
  bool exit_has_error = false;
  for (const auto& exit : events_named(events, "worker.exit")) {
    if (exit["rank"] == 1 && exit.contains("error")) exit_has_error = exit["error"]["type"] == "ValueError";
  }
  CHECK(exit_has_error);
  DtrainProcess status = env.run({"status", run_id_of(dir)});
  INFO("dtrain status:\n" << status.out());
  CHECK(status.out().find("ValueError: bad batch") != std::string::npos);
  CHECK(status.out().find("train.py\", line 3, in load_batch") != std::string::npos);
  check_nothing_left(run_id_of(dir));
}

TEST_CASE("bootstrap: torch's own @record file wins over the bootstrap's, and a plain exit code stays an exit code") {
  DtrainEnv env;
  std::string script = env.dir.path + "/train.py";
  // What torch.distributed.elastic.multiprocessing.errors.record writes, by hand (no torch here).
  write_text(script,
             "import json, os, sys, time\n"
             "if os.environ['RANK'] == '0':\n"
             "    with open(os.environ['TORCHELASTIC_ERROR_FILE'], 'w') as f:\n"
             "        json.dump({'message': {'message': 'RuntimeError: NCCL error', 'extraInfo': "
             "{'py_callstack': 'Traceback: from record', 'timestamp': '1700000000'}}}, f)\n"
             "    raise KeyError('not this one')\n"
             "if os.environ['RANK'] == '1':\n"
             "    time.sleep(60)\n");
  DtrainProcess process = env.run({"submit", env.write_spec("rec.yaml", spec_for("rec", 2, script))});
  CHECK(process.exit_code == 1);
  std::string dir = env.run_dirs().at(0);
  nlohmann::json cause = state_of(dir)["root_cause"];
  CHECK(cause["message"] == "RuntimeError: NCCL error");
  CHECK(cause["traceback"] == "Traceback: from record");
  check_nothing_left(run_id_of(dir));
}

TEST_CASE("bootstrap: the user's sitecustomize still runs — instrument: off leaves PYTHONPATH alone") {
  DtrainEnv env;
  std::string user = env.dir.path + "/usersite";
  ::mkdir(user.c_str(), 0700);
  write_text(user + "/sitecustomize.py", "import os\nos.environ['USER_SITECUSTOMIZE'] = 'ran'\n");
  std::string script = env.dir.path + "/show.py";
  write_text(script,
             "import os\n"
             "print('PYTHONPATH=' + os.environ.get('PYTHONPATH', '<unset>'))\n"
             "print('USER_SITECUSTOMIZE=' + os.environ.get('USER_SITECUSTOMIZE', 'no'))\n"
             "print('ERROR_FILE=' + os.environ.get('TORCHELASTIC_ERROR_FILE', '<unset>'))\n");
  std::string worker_env = "  env: {PYTHONPATH: '" + user + "'}\n";

  DtrainProcess on = env.run({"submit", env.write_spec("on.yaml", spec_for("on", 1, script, worker_env))});
  CHECK(on.exit_code == 0);
  std::string dir_on = env.run_dirs().at(0);
  std::string log_on = read_text(dir_on + "/ranks/0.log");
  INFO("instrumented log:\n" << log_on);
  CHECK(log_on.find("USER_SITECUSTOMIZE=ran") != std::string::npos);
  size_t at = log_on.find("PYTHONPATH=");
  REQUIRE(at != std::string::npos);
  std::string python_path = log_on.substr(at + 11, log_on.find('\n', at) - at - 11);
  CHECK(python_path.find("/python:" + user) != std::string::npos);  // bootstrap first, the user's after
  CHECK(python_path.rfind(user) + user.size() == python_path.size());
  CHECK(log_on.find("ERROR_FILE=<unset>") == std::string::npos);
  CHECK(log_on.find("error-g0-r0.json") != std::string::npos);

  DtrainProcess off = env.run(
      {"submit", env.write_spec("off.yaml", spec_for("off", 1, script, worker_env + "  instrument: off\n"))});
  CHECK(off.exit_code == 0);
  std::string dir_off;
  for (const std::string& dir : env.run_dirs()) {
    if (dir != dir_on) dir_off = dir;
  }
  std::string log_off = read_text(dir_off + "/ranks/0.log");
  INFO("uninstrumented log:\n" << log_off);
  CHECK(log_off.find("PYTHONPATH=" + user + "\n") != std::string::npos);
  CHECK(log_off.find("USER_SITECUSTOMIZE=ran") != std::string::npos);
  CHECK(read_text(dir_off + "/spec.yaml").find("instrument: off") != std::string::npos);
}

TEST_CASE("bootstrap: optimizer steps of a torch-1.13-shaped torch.optim become beats with steps in state.json") {
  DtrainEnv env;
  // A stand-in torch package: torch imports torch.optim, whose Optimizer subclasses override
  // step() (as in torch 1.13, which has no step hooks). The script itself is unmodified.
  std::string fake = env.dir.path + "/faketorch";
  ::mkdir(fake.c_str(), 0700);
  ::mkdir((fake + "/torch").c_str(), 0700);
  ::mkdir((fake + "/torch/optim").c_str(), 0700);
  write_text(fake + "/torch/__init__.py", "from . import optim\n");
  write_text(fake + "/torch/optim/__init__.py", "from .optimizer import Optimizer\nfrom .sgd import SGD\n");
  write_text(fake + "/torch/optim/optimizer.py",
             "class Optimizer:\n"
             "    def __init__(self, params, defaults):\n"
             "        self.param_groups = [{'params': list(params)}]\n"
             "    def step(self, closure=None):\n"
             "        raise NotImplementedError\n");
  write_text(fake + "/torch/optim/sgd.py",
             "from .optimizer import Optimizer\n"
             "class SGD(Optimizer):\n"
             "    def __init__(self, params, lr):\n"
             "        super().__init__(params, {'lr': lr})\n"
             "        self.steps = 0\n"
             "    def step(self, closure=None):\n"
             "        self.steps += 1\n"
             "        return self.steps\n");
  std::string script = env.dir.path + "/train.py";
  write_text(script,
             "import time, torch\n"
             "opt = torch.optim.SGD([1.0], lr=0.1)\n"
             "for _ in range(40):\n"
             "    assert opt.step() is not None\n"
             "    time.sleep(0.01)\n"
             "print('trained', opt.steps, 'steps')\n");
  DtrainProcess process = env.run(
      {"submit", env.write_spec("steps.yaml", spec_for("steps", 2, script, "  env: {PYTHONPATH: '" + fake + "'}\n"))});
  CHECK(process.exit_code == 0);
  std::string dir = env.run_dirs().at(0);
  INFO("rank 0 log:\n" << read_text(dir + "/ranks/0.log") << "\nstate.json:\n" << read_text(dir + "/state.json"));
  CHECK(read_text(dir + "/ranks/0.log").find("trained 40 steps") != std::string::npos);
  CHECK(read_text(dir + "/ranks/0.log").find("dtrain bootstrap") == std::string::npos);  // no bootstrap error
  nlohmann::json state = state_of(dir);
  CHECK(state.dump().find("\"step\":40") != std::string::npos);
  check_nothing_left(run_id_of(dir));
}

TEST_CASE("bootstrap: a script that prints binary garbage and forks a daemon during startup is still supervised") {
  DtrainEnv env;
  std::string user = env.dir.path + "/usersite";
  ::mkdir(user.c_str(), 0700);
  // Runs inside the bootstrap (the user's sitecustomize comes last): a daemon that escapes the
  // process group, and closed standard fds.
  write_text(user + "/sitecustomize.py",
             "import os, time\n"
             "if os.fork() == 0:\n"
             "    os.setsid()\n"
             "    if os.fork() == 0:\n"
             "        time.sleep(300)\n"
             "    os._exit(0)\n");
  std::string script = env.dir.path + "/garbage.py";
  write_text(script,
             "import os, sys\n"
             "os.write(1, bytes(range(256)) * 4 + b'\\n\\xff\\xfe\\x00tail\\n')\n"
             "os.close(0)\n"
             "sys.exit(7)\n");
  DtrainProcess process = env.run(
      {"submit", env.write_spec("garbage.yaml", spec_for("garbage", 2, script, "  env: {PYTHONPATH: '" + user + "'}\n"))});
  CHECK(process.exit_code == 1);
  std::string dir = env.run_dirs().at(0);
  nlohmann::json cause = state_of(dir)["root_cause"];
  CHECK(cause["code"] == 7);
  CHECK(cause["message"] == "exit code 7");  // SystemExit is no exception record
  check_nothing_left(run_id_of(dir));
}

TEST_CASE("bootstrap: an unmodified torch script's optimizer steps show up as beats (python3-torch)") {
  require_python_module("torch.optim");
  DtrainEnv env;
  std::string script = env.dir.path + "/train.py";
  write_text(script,
             "import torch\n"
             "model = torch.nn.Linear(4, 1)\n"
             "opt = torch.optim.SGD(model.parameters(), lr=0.01)\n"
             "for _ in range(30):\n"
             "    opt.zero_grad()\n"
             "    loss = model(torch.randn(8, 4)).pow(2).mean()\n"
             "    loss.backward()\n"
             "    opt.step()\n"
             "print('done', torch.__version__)\n");
  DtrainProcess process = env.run({"submit", env.write_spec("torch.yaml", spec_for("torch", 1, script))});
  CHECK(process.exit_code == 0);
  std::string dir = env.run_dirs().at(0);
  INFO("rank 0 log:\n" << read_text(dir + "/ranks/0.log"));
  CHECK(read_text(dir + "/ranks/0.log").find("dtrain bootstrap") == std::string::npos);
  CHECK(state_of(dir).dump().find("\"step\":30") != std::string::npos);
  check_nothing_left(run_id_of(dir));
}

namespace {

/// A stand-in torch with torch.save (sleeps $SAVE_SECONDS, as a save to slow storage would) and
/// a torch-1.13-shaped torch.optim; returns the directory to put on PYTHONPATH.
std::string write_torch_with_save(const std::string& root) {
  std::string fake = root + "/savetorch";
  ::mkdir(fake.c_str(), 0700);
  ::mkdir((fake + "/torch").c_str(), 0700);
  ::mkdir((fake + "/torch/optim").c_str(), 0700);
  // As in torch 1.13: `from .serialization import save` comes before torch.optim is imported.
  write_text(fake + "/torch/__init__.py", "from .serialization import save\nfrom . import optim\n");
  write_text(fake + "/torch/serialization.py",
             "import os, time\n"
             "def save(obj, path):\n"
             "    time.sleep(float(os.environ['SAVE_SECONDS']))\n"
             "    with open(path, 'w') as f:\n"
             "        f.write(repr(obj))\n");
  write_text(fake + "/torch/optim/__init__.py", "from .optimizer import Optimizer\nfrom .sgd import SGD\n");
  write_text(fake + "/torch/optim/optimizer.py",
             "class Optimizer:\n"
             "    def __init__(self, params, defaults):\n"
             "        self.param_groups = [{'params': list(params)}]\n");
  write_text(fake + "/torch/optim/sgd.py",
             "from .optimizer import Optimizer\n"
             "class SGD(Optimizer):\n"
             "    def __init__(self, params, lr):\n"
             "        super().__init__(params, {'lr': lr})\n"
             "    def step(self, closure=None):\n"
             "        pass\n");
  return fake;
}

/// Rank 0 saves at step 10 with torch.save; rank 1 waits for the save as a collective would.
std::string write_saving_script(const std::string& root) {
  std::string script = root + "/save_train.py";
  write_text(script,
             "import os, time, torch\n"
             "marker = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'saved-' + os.environ['DTRAIN_RUN_ID'])\n"
             "opt = torch.optim.SGD([1.0], lr=0.1)\n"
             "for step in range(1, 21):\n"
             "    opt.step()\n"
             "    time.sleep(0.05)\n"
             "    if step == 10:\n"
             "        if os.environ['RANK'] == '0':\n"
             "            torch.save({'step': step}, marker + '.pt')\n"
             "            open(marker, 'w').close()\n"
             "        else:\n"
             "            while not os.path.exists(marker):\n"
             "                time.sleep(0.05)\n"
             "print('trained to step', step, flush=True)\n");
  return script;
}

std::string saving_spec(const std::string& name, const std::string& script, const std::string& fake,
                        const std::string& save_seconds, const std::string& checkpoint_timeout) {
  return "version: 1\nname: " + name + "\nslots_per_host: 2\n"
         "worker:\n  command: [/usr/bin/python3, '" + script + "']\n"
         "  env: {PYTHONPATH: '" + fake + "', SAVE_SECONDS: '" + save_seconds + "'}\n"
         "heartbeat: {interval: 200ms, timeout: 1s, hang_timeout: 2s, checkpoint_timeout: " +
         checkpoint_timeout + "}\nstop_grace: 2s\n";
}

}  // namespace

TEST_CASE("bootstrap: a torch.save longer than hang_timeout is a checkpoint phase, not a hang of the saver or its peers") {
  DtrainEnv env;
  std::string fake = write_torch_with_save(env.dir.path);
  std::string script = write_saving_script(env.dir.path);
  // The save takes 5 s, hang_timeout is 2 s: without phases rank 1 (waiting for the save) and
  // rank 0 (saving) would both be silent past it.
  DtrainProcess process =
      env.run({"submit", env.write_spec("slow.yaml", saving_spec("slow", script, fake, "5", "30s"))});
  std::string dir = env.run_dirs().at(0);
  INFO("stderr:\n" << process.err() << "\nrank 0 log:\n" << read_text(dir + "/ranks/0.log"));
  CHECK(process.exit_code == 0);
  auto events = read_events(dir + "/events.jsonl");
  CHECK(events_named(events, "worker.hang").empty());
  CHECK(read_text(dir + "/ranks/1.log").find("trained to step 20") != std::string::npos);
  CHECK(read_text(dir + "/ranks/0.log").find("dtrain bootstrap") == std::string::npos);
  check_nothing_left(run_id_of(dir));
}

TEST_CASE("bootstrap: a torch.save past heartbeat.checkpoint_timeout is a hang of the saving rank, named as a save") {
  DtrainEnv env;
  std::string fake = write_torch_with_save(env.dir.path);
  std::string script = write_saving_script(env.dir.path);
  DtrainProcess process =
      env.run({"submit", env.write_spec("stuck.yaml", saving_spec("stuck", script, fake, "120", "3s"))});
  std::string dir = env.run_dirs().at(0);
  INFO("stderr:\n" << process.err());
  CHECK(process.exit_code == 1);
  auto hangs = events_named(read_events(dir + "/events.jsonl"), "worker.hang");
  REQUIRE(hangs.size() == 1);
  CHECK(hangs[0]["rank"] == 0);
  CHECK(hangs[0]["phase"] == "checkpoint");
  CHECK(hangs[0]["step"] == 10);
  CHECK(hangs[0]["silent_ms"].get<int64_t>() >= 3000);
  nlohmann::json cause = state_of(dir)["root_cause"];
  CHECK(cause["kind"] == "worker.hang");
  CHECK(cause["message"].get<std::string>().find("checkpoint save at step 10 still running") != std::string::npos);
  check_nothing_left(run_id_of(dir));
}

TEST_CASE("bootstrap: a SIGSTOPped rank of an unmodified torch DDP script is found hung, sampled and recovered (python3-torch)") {
  require_python_module("torch.distributed");
  DtrainEnv env;
  std::string script = env.dir.path + "/ddp.py";
  write_text(script,
             "import os, time, torch, torch.distributed as dist\n"
             "dist.init_process_group('gloo')\n"
             "torch.manual_seed(0)\n"
             "model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(16, 1))\n"
             "opt = torch.optim.SGD(model.parameters(), lr=0.01)\n"
             "for step in range(150):\n"
             "    opt.zero_grad()\n"
             "    model(torch.randn(8, 16)).pow(2).mean().backward()\n"
             "    opt.step()\n"
             "    time.sleep(0.02)\n"
             "print('finished generation', os.environ['DTRAIN_GENERATION'], flush=True)\n");
  DtrainProcess run = env.start(
      {"submit", env.write_spec("ddp.yaml", "version: 1\nname: ddp\nslots_per_host: 2\n"
                                            "worker:\n  command: [/usr/bin/python3, '" + script + "']\n"
                                            "elastic: {max_restarts: 1}\n"
                                            "heartbeat: {interval: 200ms, timeout: 2s, hang_timeout: 4s}\n"
                                            "stop_grace: 2s\n")});
  std::string dir = only_run_dir(env);
  REQUIRE(!dir.empty());
  REQUIRE(wait_until([&] { return rank_field(dir, 1, "step") >= 20; }, 90000));
  int victim = rank_pid(dir, 1);
  REQUIRE(victim > 0);
  REQUIRE(::kill(victim, SIGSTOP) == 0);
  REQUIRE(run.wait(180000));
  INFO("stderr:\n" << run.err());
  CHECK(run.exit_code == 0);
  auto events = read_events(dir + "/events.jsonl");
  auto hangs = events_named(events, "worker.hang");
  REQUIRE(hangs.size() == 1);
  CHECK(hangs[0]["rank"] == 1);
  CHECK(hangs[0]["step"].get<int64_t>() >= 20);
  CHECK(events_named(events, "worker.sample").size() == 1);
  CHECK(events_named(events, "recovery.completed").size() == 1);
  CHECK(read_text(dir + "/ranks/1.log").find("finished generation 1") != std::string::npos);
  CHECK(process_gone(victim));
  check_nothing_left(run_id_of(dir));
}

TEST_CASE("bootstrap: a script that closes every fd under the bootstrap's connection keeps running, uninstrumented") {
  DtrainEnv env;
  std::string fake = write_torch_with_save(env.dir.path);
  std::string script = env.dir.path + "/closer.py";
  write_text(script,
             "import os, time, torch\n"
             "opt = torch.optim.SGD([1.0], lr=0.1)\n"
             "for step in range(1, 31):\n"
             "    opt.step()\n"
             "    time.sleep(0.02)\n"
             "    if step == 10:\n"
             "        os.closerange(3, 65536)  # the bootstrap's socket goes too\n"
             "print('finished all 30 steps', flush=True)\n");
  DtrainProcess process = env.run(
      {"submit", env.write_spec("closer.yaml", spec_for("closer", 2, script, "  env: {PYTHONPATH: '" + fake +
                                                                                 "', SAVE_SECONDS: '0'}\n"))});
  std::string dir = env.run_dirs().at(0);
  std::string log = read_text(dir + "/ranks/0.log");
  INFO("stderr:\n" << process.err() << "\nrank 0 log:\n" << log);
  CHECK(process.exit_code == 0);
  CHECK(log.find("finished all 30 steps") != std::string::npos);
  CHECK(log.find("Traceback") == std::string::npos);
  size_t first = log.find("dtrain bootstrap:");
  REQUIRE(first != std::string::npos);  // said once, then silent
  CHECK(log.find("instrumentation disabled") != std::string::npos);
  CHECK(log.find("dtrain bootstrap:", first + 1) == std::string::npos);
  check_nothing_left(run_id_of(dir));
}

TEST_CASE("bootstrap: a sitecustomize that exits while Python starts fails the rank as plain Python would, traceback shown") {
  DtrainEnv env;
  std::string user = env.dir.path + "/usersite";
  ::mkdir(user.c_str(), 0700);
  write_text(user + "/sitecustomize.py", "import sys\nsys.exit(3)\n");
  std::string script = env.dir.path + "/never.py";
  write_text(script, "print('the script ran', flush=True)\n");
  DtrainProcess process = env.run(
      {"submit", env.write_spec("exits.yaml", spec_for("exits", 1, script, "  env: {PYTHONPATH: '" + user + "'}\n"))});
  std::string dir = env.run_dirs().at(0);
  INFO("stderr:\n" << process.err());
  CHECK(process.exit_code == 1);
  nlohmann::json cause = state_of(dir)["root_cause"];
  // One rank: with two, the first to fail may have its peer killed before the peer's own
  // "Fatal Python error" reached its log.
  // Python itself turns a SystemExit while importing site into "Fatal Python error" and exit 1
  // (the same without dtrain); the bootstrap adds nothing and hides nothing.
  CHECK(cause["code"] == 1);
  CHECK(process.err().find("sys.exit(3)") != std::string::npos);
  CHECK(read_text(dir + "/ranks/0.log").find("Fatal Python error") != std::string::npos);
  CHECK(read_text(dir + "/ranks/0.log").find("the script ran") == std::string::npos);
  check_nothing_left(run_id_of(dir));
}

// --- where a step's time goes (issue 28 item 6): data_ms and comm_ms of unmodified scripts -------
// Each figure is compared with the same rank's step_ms from the same beat (state.json keeps a
// rank's latest), never with a wall-clock constant: the machine may be slow, the split holds.

namespace {

/// A rank's row in state.json.
nlohmann::json rank_row(const std::string& dir, int rank) { return state_of(dir)["ranks"].at(static_cast<size_t>(rank)); }

/// A run of `script` on `slots` ranks, finished, with its run directory; fails the test unless it
/// exited 0 without a bootstrap error.
std::string run_to_end(DtrainEnv& env, const std::string& name, int slots, const std::string& script,
                       const std::string& extra_worker = "") {
  std::vector<std::string> before = env.run_dirs();
  DtrainProcess process = env.run({"submit", env.write_spec(name + ".yaml", spec_for(name, slots, script, extra_worker))});
  std::string dir;
  for (const std::string& candidate : env.run_dirs()) {
    if (std::find(before.begin(), before.end(), candidate) == before.end()) dir = candidate;
  }
  INFO("stderr:\n" << process.err());
  REQUIRE(!dir.empty());
  INFO("rank 0 log:\n" << read_text(dir + "/ranks/0.log") << "\nstate.json:\n" << read_text(dir + "/state.json"));
  CHECK(process.exit_code == 0);
  CHECK(read_text(dir + "/ranks/0.log").find("dtrain bootstrap") == std::string::npos);
  return dir;
}

}  // namespace

TEST_CASE("bootstrap: a rank that waits for its DataLoader shows data_ms close to step_ms, and no comm_ms (python3-torch)") {
  require_python_module("torch.utils.data");
  DtrainEnv env;
  std::string script = env.dir.path + "/slow_input.py";
  write_text(script, R"PY(import time, torch
class SlowDataset(torch.utils.data.Dataset):
    def __len__(self):
        return 25
    def __getitem__(self, index):
        time.sleep(0.03)  # reading from slow storage
        return torch.ones(4)
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for batch in torch.utils.data.DataLoader(SlowDataset(), batch_size=1, num_workers=0):
    opt.zero_grad()
    model(batch).sum().backward()
    opt.step()
print('trained', flush=True)
)PY");
  std::string dir = run_to_end(env, "slowinput", 1, script);
  nlohmann::json row = rank_row(dir, 0);
  INFO("rank 0: " << row.dump());
  REQUIRE(row.contains("step_ms"));
  REQUIRE(row.contains("data_ms"));
  CHECK(row["data_ms"].get<double>() >= 0.5 * row["step_ms"].get<double>());
  CHECK(row["data_ms"].get<double>() <= 1.05 * row["step_ms"].get<double>());
  CHECK_FALSE(row.contains("comm_ms"));  // one process, no collective: no figure rather than 0
  check_nothing_left(run_id_of(dir));
}

TEST_CASE("bootstrap: DDP's gradient all-reduce is comm_ms of the rank that waits for a slow peer, not of the slow one (python3-torch)") {
  require_python_module("torch.distributed");
  DtrainEnv env;
  std::string script = env.dir.path + "/ddp_straggler.py";
  write_text(script, R"PY(import time, torch, torch.distributed as dist
dist.init_process_group('gloo')
torch.manual_seed(0)
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(16, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(25):
    opt.zero_grad()
    loss = model(torch.randn(8, 16)).pow(2).mean()
    if dist.get_rank() == 1:
        time.sleep(0.1)  # the straggler: rank 0 waits for it in DDP's all-reduce
    loss.backward()
    opt.step()
print('trained', flush=True)
)PY");
  std::string dir = run_to_end(env, "straggler", 2, script);
  nlohmann::json waiter = rank_row(dir, 0);
  nlohmann::json straggler = rank_row(dir, 1);
  INFO("rank 0: " << waiter.dump() << "\nrank 1: " << straggler.dump());
  REQUIRE(waiter.contains("comm_ms"));
  REQUIRE(straggler.contains("comm_ms"));
  CHECK(waiter["comm_ms"].get<double>() >= 0.5 * waiter["step_ms"].get<double>());
  CHECK(straggler["comm_ms"].get<double>() <= 0.25 * straggler["step_ms"].get<double>());
  CHECK_FALSE(waiter.contains("data_ms"));  // no DataLoader
  check_nothing_left(run_id_of(dir));
}

TEST_CASE("bootstrap: a synchronous all_reduce imported by name in the script's loop is comm_ms (python3-torch)") {
  require_python_module("torch.distributed");
  DtrainEnv env;
  std::string script = env.dir.path + "/all_reduce.py";
  write_text(script, R"PY(import time, torch, torch.distributed as dist
from torch.distributed import all_reduce
dist.init_process_group('gloo')
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(25):
    opt.zero_grad()
    loss = model(torch.ones(2, 4)).sum()
    loss.backward()
    if dist.get_rank() == 1:
        time.sleep(0.06)
    total = loss.detach().clone()
    all_reduce(total)  # rank 0 waits here for rank 1
    opt.step()
print('trained', flush=True)
)PY");
  std::string dir = run_to_end(env, "allreduce", 2, script);
  nlohmann::json waiter = rank_row(dir, 0);
  INFO("rank 0: " << waiter.dump() << "\nrank 1: " << rank_row(dir, 1).dump());
  REQUIRE(waiter.contains("comm_ms"));
  CHECK(waiter["comm_ms"].get<double>() >= 0.5 * waiter["step_ms"].get<double>());
  CHECK(rank_row(dir, 1).contains("comm_ms"));
  check_nothing_left(run_id_of(dir));
}

TEST_CASE("bootstrap: timing DataLoader, collectives and DDP leaves a DDP run's parameters bit for bit as with instrument: off (python3-torch)") {
  require_python_module("torch.distributed");
  DtrainEnv env;
  std::string script = env.dir.path + "/ddp_numerics.py";
  // DataLoader, DDP (several buckets), a synchronous all_reduce and an async one: every hook.
  write_text(script, R"PY(import hashlib, torch, torch.distributed as dist
dist.init_process_group('gloo')
rank = dist.get_rank()
torch.manual_seed(0)
net = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64),
                          torch.nn.ReLU(), torch.nn.Linear(64, 1))
model = torch.nn.parallel.DistributedDataParallel(net, bucket_cap_mb=0.01)
opt = torch.optim.Adam(model.parameters(), lr=0.01)
generator = torch.Generator().manual_seed(1 + rank)
data = torch.utils.data.TensorDataset(torch.randn(240, 32, generator=generator))
for (batch,) in torch.utils.data.DataLoader(data, batch_size=8):
    opt.zero_grad()
    loss = model(batch).pow(2).mean()
    loss.backward()
    opt.step()
    logged = loss.detach().clone()
    dist.all_reduce(logged)
    dist.all_reduce(logged, async_op=True).wait()
digest = hashlib.sha256(b''.join(p.detach().numpy().tobytes() for p in model.parameters()))
print('params sha256', digest.hexdigest(), flush=True)
)PY");
  auto digest_of = [](const std::string& dir) {
    std::string log = read_text(dir + "/ranks/0.log");
    size_t at = log.find("params sha256 ");
    return at == std::string::npos ? std::string("<none>") : log.substr(at, log.find('\n', at) - at);
  };
  std::string on = run_to_end(env, "numon", 2, script);
  std::string off = run_to_end(env, "numoff", 2, script, "  instrument: off\n");
  INFO("instrumented: " << digest_of(on) << "\nuninstrumented: " << digest_of(off));
  CHECK(digest_of(on) != "<none>");
  CHECK(digest_of(on) == digest_of(off));
  // The instrumented run did measure (so the comparison is not of two plain runs).
  nlohmann::json measured = rank_row(on, 0);
  nlohmann::json plain = rank_row(off, 0);
  INFO("instrumented rank 0: " << measured.dump() << "\nuninstrumented rank 0: " << plain.dump());
  CHECK(measured.contains("comm_ms"));
  CHECK(measured.contains("data_ms"));
  CHECK_FALSE(plain.contains("step_ms"));
  check_nothing_left(run_id_of(on));
  check_nothing_left(run_id_of(off));
}
