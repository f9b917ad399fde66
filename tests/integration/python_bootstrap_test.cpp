// Unmodified Python scripts under `dtrain submit` (issue 11, items 1 and 3): the agent's bootstrap
// (worker/python/bootstrap/sitecustomize.py, first on PYTHONPATH) turns optimizer steps into
// beats and uncaught exceptions into torchrun error records, which become the run's root cause.
// Torch-free: a stand-in `torch` package (the shape of torch 1.13's torch.optim) proves the step
// hook; the test with the real python3-torch skips where it is not installed.

#include <doctest/doctest.h>

#include <sys/stat.h>

#include "tests/integration/dtrain_runner.h"
#include "tests/skip.h"

using namespace dtrain::testing;

namespace {

std::string spec_for(const std::string& name, int slots, const std::string& script, const std::string& extra_worker = "") {
  return "version: 1\nname: " + name + "\nslots_per_host: " + std::to_string(slots) +
         "\nworker:\n  command: [/usr/bin/python3, '" + script + "']\n" + extra_worker +
         "heartbeat: {interval: 200ms, timeout: 3s, hang_timeout: 60s}\nstop_grace: 2s\n";
}

void check_nothing_left(const std::string& run_id) {
  bool gone = wait_until([&] { return processes_of_run(run_id).empty(); }, 5000);
  CHECK_MESSAGE(gone, "processes of run " << run_id << " survive: " << processes_of_run(run_id).size());
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

TEST_CASE("bootstrap: the user's sitecustomize still runs; instrument: off leaves PYTHONPATH alone") {
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
  if (std::system("/usr/bin/python3 -c 'import torch.optim' >/dev/null 2>&1") != 0) {
    dtrain::testing::skip_test("/usr/bin/python3 cannot import torch (apt-get install python3-torch)");
  }
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
