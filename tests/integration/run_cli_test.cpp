// `dtrain run`, the torchrun-style shorthand, end to end: real python3 workers on the embedded
// localhost default, the spec it builds kept in the run directory, torchrun lines pasted as they
// are, and bad flags refused before anything starts. After every run, no process of it remains.

#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>

#include "tests/integration/dtrain_runner.h"

using namespace dtrain::testing;

namespace {

// A plain Python script (no torch) that checks the torchrun environment a DDP script reads and
// fails loudly when any of it is missing or inconsistent.
constexpr const char* kEnvCheckScript = R"(import os, sys
env = os.environ
problems = []
for key in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR",
            "MASTER_PORT", "TORCHELASTIC_RUN_ID", "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS"):
    if not env.get(key):
        problems.append(key + " unset")
if not problems:
    rank, world = int(env["RANK"]), int(env["WORLD_SIZE"])
    if world != 4: problems.append("WORLD_SIZE=%d" % world)
    if not 0 <= rank < world: problems.append("RANK=%d" % rank)
    if env["LOCAL_RANK"] != env["RANK"]: problems.append("LOCAL_RANK=" + env["LOCAL_RANK"])
    if env["LOCAL_WORLD_SIZE"] != "4": problems.append("LOCAL_WORLD_SIZE=" + env["LOCAL_WORLD_SIZE"])
    if not 0 < int(env["MASTER_PORT"]) < 65536: problems.append("MASTER_PORT=" + env["MASTER_PORT"])
if problems:
    print("env check failed: " + ", ".join(problems), flush=True)
    sys.exit(1)
print("env ok: rank %s of %s, master %s:%s, args %r" % (env["RANK"], env["WORLD_SIZE"], env["MASTER_ADDR"],
                                                         env["MASTER_PORT"], sys.argv[1:]), flush=True)
)";

// Prints what it was started with, so a test can see the argv torchrun's rules produce.
constexpr const char* kArgvScript = R"(import os, sys
unbuffered = "-u" in getattr(sys, "orig_argv", [])
print("argv %r rank %s of %s unbuffered %s" % (sys.argv[1:], os.environ["RANK"], os.environ["WORLD_SIZE"], unbuffered), flush=True)
)";

}  // namespace

TEST_CASE("dtrain run -n 4 -- python3 train.py: four workers with torchrun's environment, spec kept") {
  DtrainEnv env;
  write_text(env.dir.path + "/train.py", kEnvCheckScript);
  DtrainProcess process =
      env.run({"run", "-n", "4", "--set", "heartbeat.interval=200ms", "--", "python3", "train.py", "--lr", "0.1"});
  std::string dir = only_run_dir(env);
  CHECK_MESSAGE(process.exit_code == 0, process.err() << read_text(dir + "/ranks/0.log"));
  for (int rank = 0; rank < 4; ++rank) {
    std::string log = read_text(dir + "/ranks/" + std::to_string(rank) + ".log");
    CHECK_MESSAGE(log.find("env ok: rank " + std::to_string(rank) + " of 4") != std::string::npos, log);
    CHECK(log.find("args ['--lr', '0.1']") != std::string::npos);
  }
  // The spec it built is in the run directory like any other: the command as written (after
  // `--`, python3 named: no -u added), the name from the script, the --set applied.
  std::string spec = read_text(dir + "/spec.yaml");
  CHECK_MESSAGE(spec.find(R"(command: ["python3", "train.py", "--lr", "0.1"])") != std::string::npos, spec);
  CHECK(spec.find("name: \"train\"") != std::string::npos);
  CHECK(spec.find("slots_per_host: 4") != std::string::npos);
  CHECK(spec.find("interval: 200ms") != std::string::npos);
  CHECK(run_id_of(dir).rfind("train-", 0) == 0);
  auto events = read_events(dir + "/events.jsonl");
  auto submitted = events_named(events, "run.submitted");
  REQUIRE(submitted.size() == 1);
  CHECK(submitted[0]["world_size"] == 4);
  CHECK(submitted[0]["spec"] == dir + "/spec.yaml");
  auto finished = events_named(events, "run.finished");
  REQUIRE(finished.size() == 1);
  CHECK(finished[0]["state"] == "succeeded");
  // `dtrain status` reads it like any submitted run.
  DtrainProcess status = env.run({"status", run_id_of(dir)});
  CHECK(status.exit_code == 0);
  CHECK(status.out().find("succeeded") != std::string::npos);
  check_nothing_left(run_id_of(dir));
}

TEST_CASE("a torchrun line pasted after dtrain run keeps the script's own arguments intact") {
  DtrainEnv env;
  write_text(env.dir.path + "/script.py", kArgvScript);
  // Everything after the script is the script's: a dtrain subcommand name and dtrain's own flags too.
  DtrainProcess process = env.run({"run", "--nproc_per_node=2", "--nnodes=1", "--max_restarts=1", "--standalone",
                                   "--monitor_interval=0.1", "--rdzv_backend=c10d", "--rdzv-endpoint", "localhost:29400",
                                   "script.py", "--lr", "0.1", "plan", "--detach", "-n", "7", "--", "x"});
  std::string dir = only_run_dir(env);
  CHECK_MESSAGE(process.exit_code == 0, process.err() << read_text(dir + "/ranks/0.log"));
  std::string expected_args = "['--lr', '0.1', 'plan', '--detach', '-n', '7', '--', 'x']";
  for (int rank = 0; rank < 2; ++rank) {
    std::string log = read_text(dir + "/ranks/" + std::to_string(rank) + ".log");
    CHECK_MESSAGE(log.find("argv " + expected_args) != std::string::npos, log);
    CHECK(log.find("rank " + std::to_string(rank) + " of 2 unbuffered True") != std::string::npos);
  }
  // torchrun runs a script as `python -u script`.
  std::string spec = read_text(dir + "/spec.yaml");
  CHECK_MESSAGE(spec.find(R"(command: ["python3", "-u", "script.py", "--lr", "0.1", "plan", "--detach")") !=
                    std::string::npos,
                spec);
  CHECK(spec.find("max_restarts: 1") != std::string::npos);
  CHECK(spec.find("slots_per_host: 2") != std::string::npos);
  // One warning line for the rendezvous flags, one for --monitor_interval; nothing about
  // --standalone (it maps: this machine is the default).
  std::string err = process.err();
  CHECK(err.find("dtrain run: warning: ignored --rdzv_backend, --rdzv-endpoint: dtrain does its own rendezvous") !=
        std::string::npos);
  CHECK(err.find("dtrain run: warning: ignored --monitor_interval: dtrain sees a worker's exit at once and a hang "
                 "through heartbeats") != std::string::npos);
  CHECK(err.find("standalone") == std::string::npos);
  check_nothing_left(run_id_of(dir));
}

TEST_CASE("dtrain run -m module and --no-python follow torchrun") {
  DtrainEnv env;
  std::filesystem::create_directories(env.dir.path + "/pkg");
  write_text(env.dir.path + "/pkg/__init__.py", "");
  write_text(env.dir.path + "/pkg/trainer.py", kArgvScript);
  DtrainProcess module = env.run({"run", "-n", "2", "-m", "pkg.trainer", "--epochs", "3"});
  std::string dir = only_run_dir(env);
  CHECK_MESSAGE(module.exit_code == 0, module.err() << read_text(dir + "/ranks/0.log"));
  CHECK(read_text(dir + "/ranks/1.log").find("argv ['--epochs', '3']") != std::string::npos);
  CHECK(read_text(dir + "/spec.yaml").find(R"(command: ["python3", "-u", "-m", "pkg.trainer", "--epochs", "3"])") !=
        std::string::npos);
  CHECK(run_id_of(dir).rfind("trainer-", 0) == 0);
  check_nothing_left(run_id_of(dir));
  std::system(("rm -rf '" + dir + "'").c_str());

  DtrainProcess plain = env.run({"run", "--no_python", "-n", "2", "--name", "shell", "/bin/sh", "-c",
                                 "echo shell rank $RANK of $WORLD_SIZE"});
  dir = only_run_dir(env);
  CHECK_MESSAGE(plain.exit_code == 0, plain.err());
  CHECK(read_text(dir + "/ranks/1.log").find("shell rank 1 of 2") != std::string::npos);
  CHECK(read_text(dir + "/spec.yaml").find(R"(command: ["/bin/sh", "-c")") != std::string::npos);
  CHECK(run_id_of(dir).rfind("shell-", 0) == 0);
  check_nothing_left(run_id_of(dir));
}

TEST_CASE("dtrain run --hostfile: a relative hostfile, its slots= winning over -n for its host") {
  DtrainEnv env;
  write_text(env.dir.path + "/train.py", kArgvScript);
  write_text(env.dir.path + "/hosts.txt", "# one host\nlocalhost slots=3\n");
  DtrainProcess process = env.run({"run", "--hostfile", "hosts.txt", "-n", "2", "train.py"});
  std::string dir = only_run_dir(env);
  CHECK_MESSAGE(process.exit_code == 0, process.err());
  CHECK(read_text(dir + "/ranks/2.log").find("rank 2 of 3") != std::string::npos);
  CHECK(read_text(dir + "/spec.yaml").find(R"({name: "localhost", slots: 3})") != std::string::npos);
  check_nothing_left(run_id_of(dir));
}

TEST_CASE("a failing script ends dtrain run like dtrain submit: exit 1 with the root cause") {
  DtrainEnv env;
  write_text(env.dir.path + "/fail.py",
             "import os, sys, time\nif os.environ['RANK'] == '1':\n    print('rank 1 gives up', flush=True)\n"
             "    sys.exit(3)\ntime.sleep(60)\n");
  DtrainProcess process = env.run({"run", "-n", "3", "--set", "stop_grace=2s", "fail.py"});
  CHECK(process.exit_code == 1);
  CHECK_MESSAGE(process.err().find("root cause: rank 1") != std::string::npos, process.err());
  CHECK(process.err().find("exit code 3") != std::string::npos);
  check_nothing_left(run_id_of(only_run_dir(env)));
}

TEST_CASE("bad dtrain run command lines are refused with exit 2 and a message naming the flag") {
  DtrainEnv env;
  write_text(env.dir.path + "/train.py", "print('must not run')\n");
  struct Case {
    std::vector<std::string> args;
    std::string message;
  };
  std::vector<Case> cases = {
      {{"--nproc_per_ndoe=2", "train.py"}, "unknown option '--nproc_per_ndoe'; did you mean '--nproc_per_node'?"},
      // An abbreviation of both spellings (argparse refuses it too: ambiguous).
      {{"--nproc", "2", "train.py"}, "did you mean '--nproc-per-node'?"},
      {{"-n", "0", "train.py"}, "-n/--nproc-per-node '0': write the number of workers per host"},
      {{"--nproc_per_node=gpus", "train.py"}, "'gpus': write the number of workers per host, e.g. -n 4 (or gpu, cpu"},
      {{"--node_rank=1", "train.py"}, "--node-rank 1: dtrain starts the workers on every host itself"},
      {{"--start-method", "thread", "train.py"}, "--start-method 'thread': torchrun takes spawn, fork or forkserver"},
      {{"--rdzv-timeout=5", "train.py"}, "unknown option '--rdzv-timeout'"},
      {{"--shutdown-timeout=-1", "train.py"}, "--shutdown-timeout '-1': write a whole number of seconds"},
      {{"--master_addr", "10.0.0.1", "train.py"}, "--master_addr: dtrain starts the workers on every host itself"},
      {{"--master-port=29500", "train.py"}, "drop --master-port"},
      {{"--nnodes=2", "train.py"}, "--nnodes 2, but the job has 1 host"},
      {{"--nnodes=3:1", "train.py"}, "--nnodes '3:1': write the number of hosts"},
      {{"--nnodes=2:4", "train.py"}, "dtrain run: --nnodes: elastic.min_hosts: '2' is more than"},
      {{"--max-restarts", "many", "train.py"}, "--max-restarts 'many'"},
      {{"-n", "2"}, "no command; write the script after the options"},
      {{"-n", "2", "--"}, "no command"},
      {{"-m", "--no-python", "train.py"}, "-m/--module and --no-python cannot be used together"},
      {{"--standalone=yes", "train.py"}, "--standalone takes no value"},
      {{"--hosts", "a", "--hostfile", "h", "train.py"}, "--hosts and --hostfile both given"},
      {{"--hosts", "bad!host", "train.py"}, "dtrain run: --hosts: hosts[0]: 'bad!host'"},
      {{"--name", "a b", "train.py"}, "dtrain run: --name: name: 'a b' may hold only"},
      {{"--set", "elastic.max_restart=2", "train.py"}, "did you mean 'max_restarts'?"},
      {{"--set", "novalue", "train.py"}, "--set novalue:"},
      {{"-n"}, "-n needs a value"},
  };
  for (const Case& c : cases) {
    DtrainProcess process = env.run([&] {
      std::vector<std::string> args = {"run"};
      args.insert(args.end(), c.args.begin(), c.args.end());
      return args;
    }());
    std::string shown;
    for (const std::string& arg : c.args) shown += arg + " ";
    CHECK_MESSAGE(process.exit_code == 2, shown << "→ exit " << process.exit_code << ": " << process.err());
    CHECK_MESSAGE(process.err().find(c.message) != std::string::npos, shown << "→ " << process.err());
  }
  CHECK(env.run_dirs().empty());  // nothing was started

  DtrainProcess help = env.run({"run", "--help"});
  CHECK(help.exit_code == 0);
  CHECK(help.out().find("--nproc_per_node") != std::string::npos);
  CHECK(help.out().find("heartbeat") != std::string::npos);  // what replaces --monitor-interval
  DtrainProcess top = env.run({"--help"});
  CHECK(top.out().find("run") != std::string::npos);
}
