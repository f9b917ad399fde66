// torchrun's own launcher scenarios (pytorch's test/distributed/launcher/test_run.py and its
// bin/ scripts), replayed against `dtrain run` with this suite's workers
// (tests/integration/torchrun_scenarios/): the same command lines, the same PET_* variables, the
// same assertions on what every worker saw. Plus what torchrun leaves implicit: every option in
// both spellings and from its variable, the flag winning over the variable, and a bad variable
// named in the error. Real dtrain, real workers; after every run, no process of it remains.

#include <doctest/doctest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/integration/dtrain_runner.h"

using namespace dtrain::testing;

namespace {

std::string scenario_file(const std::string& name) {
  return std::string(DTRAIN_SOURCE_DIR) + "/tests/integration/torchrun_scenarios/" + name;
}

/// A test's dtrain world with an empty directory for the workers' files and torchrun's test
/// sentinel in the launching environment (it must reach every worker, as under torchrun).
struct Scenario {
  DtrainEnv env;
  std::string out = env.dir.path + "/out";

  Scenario() {
    ::mkdir(out.c_str(), 0700);
    env.environment.push_back({"TEST_SENTINEL_PARENT", "FOOBAR"});
  }

  DtrainProcess run(const std::vector<std::string>& args) {
    std::vector<std::string> argv = {"run"};
    argv.insert(argv.end(), args.begin(), args.end());
    return env.run(argv);
  }

  /// The file names the workers wrote.
  std::set<std::string> written() const {
    std::set<std::string> names;
    if (DIR* d = ::opendir(out.c_str())) {
      while (dirent* entry = ::readdir(d)) {
        std::string name = entry->d_name;
        if (name != "." && name != "..") names.insert(name);
      }
      ::closedir(d);
    }
    return names;
  }

  nlohmann::json record(int rank, int restart = 0) const {
    std::string path = out + "/rank" + std::to_string(rank) + "-restart" + std::to_string(restart) + ".json";
    return nlohmann::json::parse(read_text(path), nullptr, false);
  }

  /// The one run this scenario started: its directory, after checking none of it is left running.
  std::string finished_run() {
    std::string dir = only_run_dir(env);
    REQUIRE_MESSAGE(!dir.empty(), "no run directory");
    check_nothing_left(run_id_of(dir));
    return dir;
  }
};

std::set<std::string> numbered(int count, const std::string& prefix = "", const std::string& suffix = "") {
  std::set<std::string> names;
  for (int i = 0; i < count; ++i) names.insert(prefix + std::to_string(i) + suffix);
  return names;
}

std::set<std::string> records(int ranks, int restart = 0) {
  return numbered(ranks, "rank", "-restart" + std::to_string(restart) + ".json");
}

std::vector<std::string> warning_lines(const std::string& err) {
  std::vector<std::string> lines;
  size_t at = 0;
  while ((at = err.find("dtrain run: warning:", at)) != std::string::npos) {
    size_t end = err.find('\n', at);
    lines.push_back(err.substr(at, end - at));
    at = end;
  }
  return lines;
}

/// What torchrun's bin/test_script.py asserts of every worker, checked on one rank's record.
void check_torchrun_environment(const nlohmann::json& record, int rank, int world, const std::string& run_id,
                                int max_restarts = 0, int restart = 0) {
  REQUIRE_MESSAGE(record.is_object(), "rank " << rank << " wrote no record");
  CHECK(record["RANK"] == std::to_string(rank));
  CHECK(record["LOCAL_RANK"] == std::to_string(rank));  // one host: local rank = rank
  CHECK(record["GROUP_RANK"] == "0");
  CHECK(record["ROLE_RANK"] == std::to_string(rank));
  CHECK(record["WORLD_SIZE"] == std::to_string(world));
  CHECK(record["LOCAL_WORLD_SIZE"] == std::to_string(world));
  CHECK(record["ROLE_WORLD_SIZE"] == std::to_string(world));
  CHECK(record["MASTER_ADDR"] == "127.0.0.1");
  int port = std::stoi(record["MASTER_PORT"].get<std::string>());
  CHECK((port > 0 && port < 65536));
  CHECK(record["TORCHELASTIC_RESTART_COUNT"] == std::to_string(restart));
  CHECK(record["TORCHELASTIC_MAX_RESTARTS"] == std::to_string(max_restarts));
  CHECK(record["TORCHELASTIC_RUN_ID"] == run_id);  // torch.distributed.is_torchelastic_launched()
  CHECK(record["TORCHELASTIC_ERROR_FILE"].is_string());
  CHECK(record["OMP_NUM_THREADS"] == "1");
  CHECK(record["TEST_SENTINEL_PARENT"] == "FOOBAR");
  CHECK(record["unbuffered"] == true);  // python -u, as torchrun starts a script
}

}  // namespace

TEST_CASE("torchrun scenario: a Python script on --nproc-per-node=4 workers sees torchrun's whole environment") {
  Scenario s;
  DtrainProcess process = s.run({"--nnodes=1", "--nproc-per-node=4", "--rdzv-id=4711", "--monitor-interval=1",
                                 "--start-method=spawn", scenario_file("record_env.py"), "--out-dir=" + s.out});
  std::string dir = s.finished_run();
  CHECK_MESSAGE(process.exit_code == 0, process.err() << read_text(dir + "/ranks/0.log"));
  REQUIRE(s.written() == records(4));
  for (int rank = 0; rank < 4; ++rank) {
    nlohmann::json record = s.record(rank);
    check_torchrun_environment(record, rank, 4, run_id_of(dir));
    CHECK(record["MASTER_PORT"] == s.record(0)["MASTER_PORT"]);
    CHECK(record["ROLE_NAME"] == "default");
    CHECK(record["name"] == "__main__");
    CHECK(record["module"].is_null());
  }
  // One line for each option that changes nothing here, saying why.
  std::vector<std::string> warnings = warning_lines(process.err());
  REQUIRE_MESSAGE(warnings.size() == 3, process.err());
  CHECK(warnings[0] == "dtrain run: warning: ignored --rdzv-id: dtrain does its own rendezvous, nothing to set up "
                       "(TORCHELASTIC_RUN_ID is the run's id)");
  CHECK(warnings[1].find("ignored --monitor-interval: dtrain sees a worker's exit at once and a hang through "
                         "heartbeats") != std::string::npos);
  CHECK(warnings[2].find("ignored --start-method: dtrain's agent starts every worker as a new process") !=
        std::string::npos);
}

TEST_CASE("torchrun scenario: --no-python runs a shell script on every worker, never with --module") {
  Scenario s;
  std::vector<std::string> options = {"--nnodes=1", "--nproc-per-node=4", "--rdzv-id=4711", "--monitor-interval=1",
                                      "--start-method=spawn", "--no-python"};
  SUBCASE("with --module: refused before anything starts") {
    std::vector<std::string> args = options;
    args.insert(args.end(), {"--module", scenario_file("touch_rank.sh"), s.out});
    DtrainProcess process = s.run(args);
    CHECK(process.exit_code == 2);
    CHECK_MESSAGE(process.err().find("--module and --no-python: -m/--module and --no-python cannot be used together") !=
                      std::string::npos,
                  process.err());
    CHECK(s.env.run_dirs().empty());
  }
  SUBCASE("four shell workers") {
    std::vector<std::string> args = options;
    args.insert(args.end(), {scenario_file("touch_rank.sh"), s.out});
    DtrainProcess process = s.run(args);
    std::string dir = s.finished_run();
    CHECK_MESSAGE(process.exit_code == 0, process.err() << read_text(dir + "/ranks/0.log"));
    CHECK(s.written() == numbered(4));
    for (int rank = 0; rank < 4; ++rank) {
      std::string file = read_text(s.out + "/" + std::to_string(rank));
      CHECK_MESSAGE(file.find("RANK=" + std::to_string(rank) + "\nLOCAL_RANK=" + std::to_string(rank) +
                              "\nWORLD_SIZE=4\nLOCAL_WORLD_SIZE=4\nGROUP_RANK=0\n") != std::string::npos,
                    file);
    }
    // The command as written: no python in front of it.
    CHECK(read_text(dir + "/spec.yaml").find("command: [\"" + scenario_file("touch_rank.sh") + "\", ") !=
          std::string::npos);
  }
  SUBCASE("without --nproc-per-node: one worker") {
    DtrainProcess process = s.run({"--nnodes=1", "--rdzv-id=4711", "--monitor-interval=1", "--start-method=spawn",
                                   "--no-python", scenario_file("touch_rank.sh"), s.out});
    s.finished_run();
    CHECK_MESSAGE(process.exit_code == 0, process.err());
    CHECK(s.written() == numbered(1));
  }
}

TEST_CASE("torchrun scenario: every option from its PET_ variable alone, as Kubeflow's PyTorchJob passes them") {
  Scenario s;
  s.env.environment.insert(s.env.environment.end(), {{"PET_NNODES", "1"},
                                                     {"PET_NPROC_PER_NODE", "4"},
                                                     {"PET_RDZV_ID", "4711"},
                                                     {"PET_MONITOR_INTERVAL", "1"},
                                                     {"PET_START_METHOD", "spawn"},
                                                     {"PET_NO_PYTHON", "1"}});
  SUBCASE("PET_MODULE=1 with PET_NO_PYTHON=1: refused, naming both") {
    s.env.environment.push_back({"PET_MODULE", "1"});
    DtrainProcess process = s.run({scenario_file("touch_rank.sh"), s.out});
    CHECK(process.exit_code == 2);
    CHECK_MESSAGE(process.err().find("PET_MODULE=1 and PET_NO_PYTHON=1: -m/--module and --no-python cannot be used "
                                     "together") != std::string::npos,
                  process.err());
    CHECK(s.env.run_dirs().empty());
  }
  SUBCASE("PET_MODULE=0: four shell workers") {
    s.env.environment.push_back({"PET_MODULE", "0"});
    DtrainProcess process = s.run({scenario_file("touch_rank.sh"), s.out});
    std::string dir = s.finished_run();
    CHECK_MESSAGE(process.exit_code == 0, process.err() << read_text(dir + "/ranks/0.log"));
    CHECK(s.written() == numbered(4));
    std::string spec = read_text(dir + "/spec.yaml");
    CHECK(spec.find("slots_per_host: 4") != std::string::npos);
    CHECK(spec.find("python") == std::string::npos);
    std::vector<std::string> warnings = warning_lines(process.err());
    REQUIRE_MESSAGE(warnings.size() == 3, process.err());
    CHECK(warnings[0].find("ignored PET_RDZV_ID: dtrain does its own rendezvous") != std::string::npos);
    CHECK(warnings[1].find("ignored PET_MONITOR_INTERVAL: ") != std::string::npos);
    CHECK(warnings[2].find("ignored PET_START_METHOD: ") != std::string::npos);
  }
}

TEST_CASE("torchrun scenario: --nproc-per-node as a number, gpu, cpu, auto, or unknown") {
  Scenario s;
  const int cpus = static_cast<int>(::sysconf(_SC_NPROCESSORS_ONLN));
  // tests/fakes' nvidia-smi lists two GPUs, or none when told to fail (the agent's own probe).
  std::string fakes = std::string(DTRAIN_SOURCE_DIR) + "/tests/fakes";
  const char* path = std::getenv("PATH");
  s.env.environment.push_back({"PATH", fakes + ":" + (path ? path : "/usr/bin:/bin")});
  struct Case {
    std::string value;
    bool gpus_listed;
    int workers;  ///< 0: refused
    std::string message;
  };
  std::vector<Case> cases = {
      {"4", true, 4, ""},
      {"gpu", true, 2, "dtrain run: -n/--nproc-per-node 'gpu': 2 workers, one per GPU nvidia-smi lists on this machine"},
      {"auto", true, 2, "dtrain run: -n/--nproc-per-node 'auto': 2 workers, one per GPU nvidia-smi lists"},
      {"auto", false, cpus, "one per CPU (nvidia-smi lists no GPU)"},
      {"cpu", true, cpus, "dtrain run: -n/--nproc-per-node 'cpu': "},
      {"gpu", false, 0, "--nproc-per-node 'gpu': no GPU on this machine (nvidia-smi lists none)"},
      {"unknown", true, 0, "-n/--nproc-per-node 'unknown': write the number of workers per host, e.g. -n 4 (or gpu, "
                           "cpu, auto)"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.value);
    CAPTURE(c.gpus_listed);
    Scenario one;
    one.env.environment = s.env.environment;
    if (!c.gpus_listed) one.env.environment.push_back({"DTRAIN_FAKE_NVIDIA_SMI_EXIT", "9"});
    DtrainProcess process = one.run({"--nnodes=1", "--nproc-per-node=" + c.value, "--rdzv-id=4711",
                                     "--no-python", scenario_file("touch_rank.sh"), one.out});
    if (c.workers == 0) {
      CHECK(process.exit_code == 2);
      CHECK(one.env.run_dirs().empty());
    } else {
      one.finished_run();
      CHECK(process.exit_code == 0);
      CHECK(one.written() == numbered(c.workers));
    }
    CHECK_MESSAGE(process.err().find(c.message) != std::string::npos, process.err());
  }
  // With hosts listed, a device count is another host's: only a number will do.
  DtrainProcess listed = s.run({"--hosts", "localhost", "--nproc-per-node=gpu", "--no-python",
                                scenario_file("touch_rank.sh"), s.out});
  CHECK(listed.exit_code == 2);
  CHECK_MESSAGE(listed.err().find("'gpu': dtrain counts devices only for a job on this machine alone") !=
                    std::string::npos,
                listed.err());
}

TEST_CASE("torchrun scenario: elastic --nnodes=1:2 with a c10d rendezvous line runs on the one host given") {
  Scenario s;
  DtrainProcess process = s.run({"--nnodes=1:2", "--nproc-per-node=4", "--rdzv-backend=c10d",
                                 "--rdzv-endpoint=localhost:29411", "--rdzv-conf='join_timeout=5,last_call_timeout=1,timeout=5'",
                                 "--rdzv-id=4711", "--monitor-interval=1", "--start-method=spawn",
                                 scenario_file("record_env.py"), "--out-dir=" + s.out});
  std::string dir = s.finished_run();
  CHECK_MESSAGE(process.exit_code == 0, process.err() << read_text(dir + "/ranks/0.log"));
  CHECK(s.written() == records(4));
  check_torchrun_environment(s.record(3), 3, 4, run_id_of(dir));
  CHECK(process.err().find("dtrain run: --nnodes 1:2: starting on the job's 1 host") != std::string::npos);
  CHECK(process.err().find("ignored --rdzv-backend, --rdzv-endpoint, --rdzv-conf, --rdzv-id: dtrain does its own "
                           "rendezvous") != std::string::npos);
}

TEST_CASE("torchrun scenario: a worker that raises fails the run, and --max-restarts restarts it") {
  Scenario s;
  SUBCASE("--max-restarts=0: exit 1 with the root cause") {
    DtrainProcess process = s.run({"--nnodes=1:2", "--nproc-per-node=4", "--rdzv-backend=c10d",
                                   "--rdzv-endpoint=localhost:29411", "--rdzv-id=4711", "--monitor-interval=1",
                                   "--max-restarts=0", "--start-method=spawn", scenario_file("record_env.py"),
                                   "--out-dir=" + s.out, "--fail"});
    s.finished_run();
    CHECK(process.exit_code == 1);
    CHECK_MESSAGE(process.err().find("root cause: rank ") != std::string::npos, process.err());
    CHECK(process.err().find("RuntimeError: record_env: failing as asked (restart 0)") != std::string::npos);
    CHECK(s.written().count("rank0-restart1.json") == 0);  // never restarted
  }
  SUBCASE("--max-restarts=2: rank 1 fails twice, the third generation succeeds") {
    DtrainProcess process = s.run({"--nproc-per-node=2", "--max-restarts=2", "--shutdown-timeout=2",
                                   scenario_file("record_env.py"), "--out-dir=" + s.out, "--fail-rank=1",
                                   "--until-restart=2"});
    std::string dir = s.finished_run();
    CHECK_MESSAGE(process.exit_code == 0, process.err());
    for (int restart = 0; restart <= 2; ++restart) {
      check_torchrun_environment(s.record(1, restart), 1, 2, run_id_of(dir), 2, restart);
    }
    CHECK(s.written().count("rank1-restart3.json") == 0);
    CHECK(read_text(dir + "/spec.yaml").find("stop_grace: 2s") != std::string::npos);
  }
  SUBCASE("--max-restarts=1: rank 1 fails twice, the run fails after one restart") {
    DtrainProcess process = s.run({"--nproc-per-node=2", "--max-restarts=1", "--shutdown-timeout=2",
                                   scenario_file("record_env.py"), "--out-dir=" + s.out, "--fail-rank=1",
                                   "--until-restart=2"});
    s.finished_run();
    CHECK(process.exit_code == 1);
    CHECK(s.record(1, 1)["TORCHELASTIC_RESTART_COUNT"] == "1");
    CHECK(s.written().count("rank1-restart2.json") == 0);
  }
}

TEST_CASE("torchrun scenario: --standalone, --run-path and -m start the same script the way torchrun does") {
  Scenario s;
  SUBCASE("--standalone") {
    DtrainProcess process = s.run({"--nnodes=1", "--nproc-per-node=4", "--standalone", "--monitor-interval=1",
                                   "--start-method=spawn", scenario_file("record_env.py"), "--out-dir=" + s.out});
    std::string dir = s.finished_run();
    CHECK_MESSAGE(process.exit_code == 0, process.err());
    CHECK(s.written() == records(4));
    check_torchrun_environment(s.record(2), 2, 4, run_id_of(dir));
    CHECK(process.err().find("standalone") == std::string::npos);  // it maps: nothing to warn about
  }
  SUBCASE("--run-path: the file run as a script, over --no-python") {
    DtrainProcess process = s.run({"--run-path", "--no-python", "--nnodes=1", "--nproc-per-node=4",
                                   "--monitor-interval=1", "--start-method=spawn", scenario_file("record_env.py"),
                                   "--out-dir=" + s.out, "extra"});
    std::string dir = s.finished_run();
    CHECK_MESSAGE(process.exit_code == 0, process.err() << read_text(dir + "/ranks/0.log"));
    CHECK(s.written() == records(4));
    nlohmann::json record = s.record(3);
    check_torchrun_environment(record, 3, 4, run_id_of(dir));
    CHECK(record["name"] == "__main__");
    CHECK(record["argv"] == nlohmann::json::array({scenario_file("record_env.py"), "--out-dir=" + s.out, "extra"}));
    CHECK(read_text(dir + "/spec.yaml").find("command: [\"python3\", \"-u\", \"" + scenario_file("record_env.py")) !=
          std::string::npos);
  }
  SUBCASE("PET_RUN_PATH=1") {
    s.env.environment.push_back({"PET_RUN_PATH", "1"});
    DtrainProcess process = s.run({"--nproc-per-node=2", scenario_file("record_env.py"), "--out-dir=" + s.out});
    s.finished_run();
    CHECK_MESSAGE(process.exit_code == 0, process.err());
    CHECK(s.written() == records(2));
  }
  SUBCASE("-m: a module found on PYTHONPATH") {
    s.env.environment.push_back({"PYTHONPATH", scenario_file("")});
    DtrainProcess process = s.run({"--nproc-per-node=2", "-m", "record_env", "--out-dir=" + s.out});
    std::string dir = s.finished_run();
    CHECK_MESSAGE(process.exit_code == 0, process.err() << read_text(dir + "/ranks/0.log"));
    CHECK(s.written() == records(2));
    nlohmann::json record = s.record(1);
    check_torchrun_environment(record, 1, 2, run_id_of(dir));
    CHECK(record["module"] == "record_env");
    CHECK(run_id_of(dir).rfind("record_env-", 0) == 0);
  }
}

TEST_CASE("torchrun scenario: output options, an abbreviated one included, are accepted and --tee shows every rank") {
  Scenario s;
  // test_run.py's log capture line writes --redirect for --redirects (argparse takes a unique
  // abbreviation); the logs specs plug-in line, --logs_specs.
  DtrainProcess process = s.run({"--nnodes=1", "--nproc-per-node=4", "--rdzv-id=4711", "--redirect=3", "--tee=3",
                                 "--logs_specs=default", "--monitor-interval=1", "--start-method=spawn", "--no-python",
                                 scenario_file("touch_rank.sh"), s.out});
  std::string dir = s.finished_run();
  CHECK_MESSAGE(process.exit_code == 0, process.err());
  CHECK(s.written() == numbered(4));
  for (int rank = 0; rank < 4; ++rank) {
    CHECK(read_text(dir + "/ranks/" + std::to_string(rank) + ".log").find("creating " + s.out) != std::string::npos);
  }
  CHECK_MESSAGE(process.err().find("dtrain run: --tee 3: shown here as --output all (from --redirect, --tee;") !=
                    std::string::npos,
                process.err());
  CHECK(process.err().find("ignored --logs_specs: a torchrun logging plug-in") != std::string::npos);
}

TEST_CASE("every torchrun option is accepted in both spellings and from its PET_ variable") {
  // All of torchrun's options at once (--master-addr/--master-port are refused, -m and
  // --no-python give way to --run-path), with the values torchrun's own documentation shows.
  struct Option {
    std::string dashed, underscored, variable, value;  ///< value "" for a switch
  };
  const std::vector<Option> options = {
      {"--nnodes", "--nnodes", "PET_NNODES", "1"},
      {"--nproc-per-node", "--nproc_per_node", "PET_NPROC_PER_NODE", "2"},
      {"--rdzv-backend", "--rdzv_backend", "PET_RDZV_BACKEND", "c10d"},
      {"--rdzv-endpoint", "--rdzv_endpoint", "PET_RDZV_ENDPOINT", "localhost:29400"},
      {"--rdzv-id", "--rdzv_id", "PET_RDZV_ID", "job-17"},
      {"--rdzv-conf", "--rdzv_conf", "PET_RDZV_CONF", "timeout=5"},
      {"--standalone", "--standalone", "PET_STANDALONE", ""},
      {"--max-restarts", "--max_restarts", "PET_MAX_RESTARTS", "0"},
      {"--monitor-interval", "--monitor_interval", "PET_MONITOR_INTERVAL", "0.5"},
      {"--start-method", "--start_method", "PET_START_METHOD", "fork"},
      {"--event-log-handler", "--event_log_handler", "PET_EVENT_LOG_HANDLER", "null"},
      {"--role", "--role", "PET_ROLE", "trainer"},
      {"--module", "-m", "PET_MODULE", ""},
      {"--no-python", "--no_python", "PET_NO_PYTHON", ""},
      {"--run-path", "--run_path", "PET_RUN_PATH", ""},
      {"--log-dir", "--log_dir", "PET_LOG_DIR", "/tmp/torchrun-logs"},
      {"--redirects", "-r", "PET_REDIRECTS", "3"},
      {"--tee", "-t", "PET_TEE", "3"},
      {"--local-ranks-filter", "--local_ranks_filter", "PET_LOCAL_RANKS_FILTER", "0"},
      {"--duplicate-stdout-filters", "--duplicate_stdout_filters", "PET_DUPLICATE_STDOUT_FILTERS", "loss"},
      {"--duplicate-stderr-filters", "--duplicate_stderr_filters", "PET_DUPLICATE_STDERR_FILTERS", "error"},
      {"--node-rank", "--node_rank", "PET_NODE_RANK", "0"},
      {"--local-addr", "--local_addr", "PET_LOCAL_ADDR", "127.0.0.1"},
      {"--logs-specs", "--logs_specs", "PET_LOGS_SPECS", "default"},
      {"--numa-binding", "--numa_binding", "PET_NUMA_BINDING", "node"},
      {"--signals-to-handle", "--signals_to_handle", "PET_SIGNALS_TO_HANDLE", "SIGTERM,SIGINT,SIGUSR1"},
      {"--shutdown-timeout", "--shutdown_timeout", "PET_SHUTDOWN_TIMEOUT", "5"},
      {"--virtual-local-rank", "--virtual_local_rank", "PET_VIRTUAL_LOCAL_RANK", ""},
  };
  enum class Given { dashed, underscored, variables };
  for (Given given : {Given::dashed, Given::underscored, Given::variables}) {
    CAPTURE(static_cast<int>(given));
    Scenario s;
    std::vector<std::string> args;
    for (const Option& option : options) {
      if (given == Given::variables) {
        s.env.environment.push_back({option.variable, option.value.empty() ? "1" : option.value});
        continue;
      }
      const std::string& flag = given == Given::dashed ? option.dashed : option.underscored;
      if (option.value.empty()) args.push_back(flag);
      else if (flag.size() == 2) args.insert(args.end(), {flag, option.value});  // -r 3
      else args.push_back(flag + "=" + option.value);
    }
    args.insert(args.end(), {scenario_file("record_env.py"), "--out-dir=" + s.out});
    DtrainProcess process = s.run(args);
    std::string dir = s.finished_run();
    CHECK_MESSAGE(process.exit_code == 0, process.err() << read_text(dir + "/ranks/0.log"));
    REQUIRE(s.written() == records(2));
    nlohmann::json record = s.record(1);
    check_torchrun_environment(record, 1, 2, run_id_of(dir));
    CHECK(record["ROLE_NAME"] == "trainer");  // --role
    CHECK(record["name"] == "__main__");      // --run-path over -m and --no-python
    std::string spec = read_text(dir + "/spec.yaml");
    CHECK(spec.find("stop_grace: 5s") != std::string::npos);  // --shutdown-timeout
    // One warning line per reason, each option named once.
    std::vector<std::string> warnings = warning_lines(process.err());
    CHECK_MESSAGE(warnings.size() == 10, process.err());  // ten reasons; the output options map onto --output
    std::string err = process.err();
    size_t mapped = err.find(": shown here as --output ");
    REQUIRE_MESSAGE(mapped != std::string::npos, err);
    std::string mapped_line = err.substr(mapped, err.find('\n', mapped) - mapped);
    for (const Option& option : options) {
      if (option.value == "trainer" || option.variable == "PET_NNODES" || option.variable == "PET_NPROC_PER_NODE" ||
          option.variable == "PET_MAX_RESTARTS" || option.variable == "PET_SHUTDOWN_TIMEOUT" ||
          option.variable == "PET_NODE_RANK" || option.variable == "PET_STANDALONE" || option.variable == "PET_MODULE" ||
          option.variable == "PET_NO_PYTHON" || option.variable == "PET_RUN_PATH") {
        continue;  // mapped: no warning
      }
      std::string name = given == Given::variables ? option.variable
                         : given == Given::dashed  ? option.dashed
                                                   : option.underscored;
      if (option.variable == "PET_LOG_DIR" || option.variable == "PET_REDIRECTS" || option.variable == "PET_TEE" ||
          option.variable == "PET_LOCAL_RANKS_FILTER") {
        CHECK_MESSAGE(mapped_line.find(name) != std::string::npos, name << " in " << mapped_line);  // --output's line
        continue;
      }
      int named = 0;
      for (const std::string& line : warnings) {
        std::string listed = line.substr(0, line.find(": ", std::string("dtrain run: warning: ").size()));
        if ((listed + ",").find(" " + name + ",") != std::string::npos) ++named;
      }
      CHECK_MESSAGE(named == 1, name << " in " << process.err());
    }
  }
}

TEST_CASE("an explicit flag wins over its PET_ variable") {
  Scenario s;
  s.env.environment.insert(s.env.environment.end(), {{"PET_NPROC_PER_NODE", "4"},
                                                     {"PET_NO_PYTHON", "0"},
                                                     {"PET_MAX_RESTARTS", "many"},
                                                     {"PET_ROLE", "from-variable"}});
  DtrainProcess process = s.run({"-n", "2", "--no-python", "--max-restarts", "0", "--role=from-flag",
                                 scenario_file("touch_rank.sh"), s.out});
  std::string dir = s.finished_run();
  CHECK_MESSAGE(process.exit_code == 0, process.err());  // PET_MAX_RESTARTS=many is not read
  CHECK(s.written() == numbered(2));
  std::string spec = read_text(dir + "/spec.yaml");
  CHECK(spec.find("slots_per_host: 2") != std::string::npos);
  CHECK(spec.find("ROLE_NAME: \"from-flag\"") != std::string::npos);
  CHECK(spec.find("python") == std::string::npos);
}

TEST_CASE("a bad PET_ variable is refused with exit 2, naming the variable") {
  struct Case {
    std::string variable, value, message;
  };
  std::vector<Case> cases = {
      {"PET_NPROC_PER_NODE", "many", "PET_NPROC_PER_NODE='many': write the number of workers per host"},
      {"PET_NPROC_PER_NODE", "0", "PET_NPROC_PER_NODE='0': write the number of workers per host"},
      {"PET_NO_PYTHON", "yes", "PET_NO_PYTHON='yes': write 1 to turn --no-python on or 0 for off"},
      {"PET_STANDALONE", "true", "PET_STANDALONE='true': write 1 to turn --standalone on"},
      {"PET_MAX_RESTARTS", "-1", "PET_MAX_RESTARTS='-1': write a number of restarts"},
      {"PET_NNODES", "2", "PET_NNODES=2, but the job has 1 host"},
      {"PET_NNODES", "3:1", "PET_NNODES='3:1': write the number of hosts"},
      {"PET_START_METHOD", "thread", "PET_START_METHOD='thread': torchrun takes spawn, fork or forkserver"},
      {"PET_MONITOR_INTERVAL", "soon", "PET_MONITOR_INTERVAL='soon': write a number of seconds"},
      {"PET_SHUTDOWN_TIMEOUT", "later", "PET_SHUTDOWN_TIMEOUT='later': write a whole number of seconds"},
      {"PET_NODE_RANK", "1", "PET_NODE_RANK 1: dtrain starts the workers on every host itself"},
      {"PET_MASTER_ADDR", "10.0.0.1", "PET_MASTER_ADDR: dtrain starts the workers on every host itself"},
      {"PET_MASTER_PORT", "29500", "and unset PET_MASTER_PORT"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.variable);
    CAPTURE(c.value);
    Scenario s;
    s.env.environment.push_back({c.variable, c.value});
    DtrainProcess process = s.run({scenario_file("touch_rank.sh"), s.out});
    CHECK(process.exit_code == 2);
    CHECK_MESSAGE(process.err().find(c.message) != std::string::npos, process.err());
    CHECK(s.env.run_dirs().empty());
  }
}

TEST_CASE("--node-rank 0 is accepted on a one-host job (Kubeflow's single pod), refused with more hosts") {
  Scenario s;
  s.env.environment.insert(s.env.environment.end(),
                           {{"PET_NNODES", "1"}, {"PET_NODE_RANK", "0"}, {"PET_NPROC_PER_NODE", "2"}});
  DtrainProcess process = s.run({"--no-python", scenario_file("touch_rank.sh"), s.out});
  s.finished_run();
  CHECK_MESSAGE(process.exit_code == 0, process.err());
  CHECK(s.written() == numbered(2));

  Scenario two_hosts;
  DtrainProcess refused = two_hosts.run({"--hosts", "localhost,127.0.0.1", "--node-rank=0", "--no-python",
                                         scenario_file("touch_rank.sh"), two_hosts.out});
  CHECK(refused.exit_code == 2);
  CHECK_MESSAGE(refused.err().find("--node-rank 0, but the job has 2 hosts; dtrain starts every host itself") !=
                    std::string::npos,
                refused.err());
  CHECK(two_hosts.env.run_dirs().empty());
}
