// `dtrain submit` end to end on the embedded localhost default: real agent, real workers, real
// signals. After every ending, no process of the run may remain.

#include <doctest/doctest.h>

#include <signal.h>

#include "tests/integration/dtrain_runner.h"

using namespace dtrain::testing;

namespace {

std::string spec_with_command(const std::string& name, int slots, const std::string& command_yaml,
                              const std::string& worker_extra = "") {
  return "version: 1\nname: " + name + "\nslots_per_host: " + std::to_string(slots) +
         "\nworker:\n  command: " + command_yaml + "\n" + worker_extra +
         "heartbeat: {interval: 200ms, timeout: 3s, hang_timeout: 60s}\nstop_grace: 2s\n";
}

}  // namespace

TEST_CASE("a job whose workers all exit 0 succeeds and logs the expected event sequence") {
  DtrainEnv env;
  std::string spec = env.write_spec(
      "ok.yaml", spec_with_command("ok", 3, "[/bin/sh, -c, 'echo hello from $RANK of $WORLD_SIZE']"));
  DtrainProcess process = env.run({"submit", spec});
  CHECK(process.exit_code == 0);
  REQUIRE(env.run_dirs().size() == 1);
  std::string dir = env.run_dirs()[0];
  auto events = read_events(dir + "/events.jsonl");
  std::vector<std::string> order = {"run.submitted", "host.connected", "host.facts",
                                    "plan.generation", "worker.started", "worker.exit",
                                    "resources.released", "run.finished"};
  size_t position = 0;
  for (const auto& event : events) {
    if (position < order.size() && event.value("ev", "") == order[position]) ++position;
  }
  CHECK_MESSAGE(position == order.size(), "missing " << (position < order.size() ? order[position] : ""));
  CHECK(events_named(events, "worker.started").size() == 3);
  CHECK(events_named(events, "worker.exit").size() == 3);
  auto finished = events_named(events, "run.finished");
  REQUIRE(finished.size() == 1);
  CHECK(finished[0]["state"] == "succeeded");
  CHECK(read_text(dir + "/ranks/1.log").find("hello from 1 of 3") != std::string::npos);
  nlohmann::json state = nlohmann::json::parse(read_text(dir + "/state.json"));
  CHECK(state["state"] == "succeeded");
  CHECK(state["exit_code"] == 0);
  CHECK(read_text(dir + "/plan-0.json").find("\"world_size\": 3") != std::string::npos);
  check_nothing_left(run_id_of(dir));
}

TEST_CASE("a worker that exits 3 fails the run with a root-cause summary") {
  DtrainEnv env;
  std::string spec = env.write_spec(
      "exit3.yaml",
      spec_with_command("exit3", 4,
                        "[/bin/sh, -c, 'if [ \"$RANK\" = 2 ]; then echo about to fail; exit 3; fi; exec sleep 60']"));
  DtrainProcess process = env.run({"submit", spec});
  CHECK(process.exit_code == 1);
  std::string err = process.err();
  CHECK(err.find("root cause: rank 2 (local rank 2) on host localhost") != std::string::npos);
  CHECK(err.find("exit code 3") != std::string::npos);
  CHECK(err.find("ranks/2.log") != std::string::npos);
  std::string dir = env.run_dirs().at(0);
  nlohmann::json state = nlohmann::json::parse(read_text(dir + "/state.json"));
  CHECK(state["state"] == "failed");
  CHECK(state["exit_code"] == 1);
  CHECK(state["root_cause"]["rank"] == 2);
  CHECK(state["root_cause"]["code"] == 3);
  auto exits = events_named(read_events(dir + "/events.jsonl"), "worker.exit");
  bool tail_seen = false;
  for (const auto& exit : exits) {
    if (exit["rank"] == 2) tail_seen = exit.dump().find("about to fail") != std::string::npos;
  }
  CHECK(tail_seen);
  check_nothing_left(run_id_of(dir));
}

TEST_CASE("a worker killed by SIGKILL is reported with the signal name") {
  DtrainEnv env;
  std::string spec = env.write_spec(
      "kill.yaml",
      spec_with_command("kill9", 2, "[/bin/sh, -c, 'if [ \"$RANK\" = 1 ]; then kill -9 $$; fi; exec sleep 60']"));
  DtrainProcess process = env.run({"submit", spec});
  CHECK(process.exit_code == 1);
  CHECK(process.err().find("killed by SIGKILL") != std::string::npos);
  std::string dir = env.run_dirs().at(0);
  auto detected = events_named(read_events(dir + "/events.jsonl"), "failure.detected");
  REQUIRE(!detected.empty());
  CHECK(detected[0]["signal"] == "SIGKILL");
  CHECK(detected[0]["rank"] == 1);
  check_nothing_left(run_id_of(dir));
}

TEST_CASE("Ctrl-C stops the run cleanly with exit 130 and leaves no process, grandchildren included") {
  DtrainEnv env;
  // Each worker leaves a daemonised grandchild behind, the way data loaders sometimes do.
  std::string spec = env.write_spec(
      "sigint.yaml",
      spec_with_command("sigint", 2, "[/bin/sh, -c, 'setsid sleep 300 & echo started; exec sleep 300']"));
  DtrainProcess process = env.start({"submit", spec});
  std::string run_dir;
  bool running = wait_until([&] {
    auto dirs = env.run_dirs();
    if (dirs.empty()) return false;
    run_dir = dirs[0];
    return read_text(run_dir + "/state.json").find("\"state\":\"running\"") != std::string::npos ||
           read_text(run_dir + "/state.json").find("\"state\": \"running\"") != std::string::npos;
  }, 30000);
  REQUIRE(running);
  REQUIRE(wait_until([&] { return processes_of_run(run_id_of(run_dir)).size() >= 4; }, 10000));
  ::kill(process.pid, SIGINT);
  REQUIRE(process.wait(30000));
  CHECK(process.exit_code == 130);
  nlohmann::json state = nlohmann::json::parse(read_text(run_dir + "/state.json"));
  CHECK(state["state"] == "stopped");
  check_nothing_left(run_id_of(run_dir));
}

TEST_CASE("argv with spaces, quotes, $() and newlines reaches the worker unchanged") {
  DtrainEnv env;
  std::string spec = env.write_spec(
      "argv.yaml",
      spec_with_command("argv", 1,
                        "[/usr/bin/python3, -c, 'import sys, json; print(json.dumps(sys.argv[1:], separators=(\",\", \":\")))', "
                        "'two words', \"it's\", '\"dq\"', '$(touch /tmp/dtrain-pwned)', '`id`', "
                        "'a;b', \"line1\\nline2\", '*']"));
  DtrainProcess process = env.run({"submit", spec});
  CHECK(process.exit_code == 0);
  std::string log = read_text(env.run_dirs().at(0) + "/ranks/0.log");
  nlohmann::json expected = {"two words", "it's", "\"dq\"", "$(touch /tmp/dtrain-pwned)", "`id`",
                             "a;b", "line1\nline2", "*"};
  CHECK_MESSAGE(log.find(expected.dump()) != std::string::npos, log);
}

TEST_CASE("workers get the torchrun-compatible environment and dtrain's own") {
  DtrainEnv env;
  std::string spec = env.write_spec(
      "env.yaml",
      spec_with_command("env", 2,
                        "[/usr/bin/python3, -c, 'import os, json; print(json.dumps({k: v for k, v in "
                        "os.environ.items() if k in (\"RANK\",\"LOCAL_RANK\",\"WORLD_SIZE\",\"LOCAL_WORLD_SIZE\","
                        "\"GROUP_RANK\",\"MASTER_ADDR\",\"MASTER_PORT\",\"TORCHELASTIC_RESTART_COUNT\",\"OMP_NUM_THREADS\","
                        "\"DTRAIN_GENERATION\",\"DTRAIN_AGENT_SOCKET\",\"DTRAIN_RUN_ID\",\"ROLE_NAME\",\"MY_VAR\")}))']",
                        "  env: {MY_VAR: 'x y'}\n"));
  DtrainProcess process = env.run({"submit", spec});
  REQUIRE(process.exit_code == 0);
  std::string dir = env.run_dirs().at(0);
  for (int rank = 0; rank < 2; ++rank) {
    std::string log = read_text(dir + "/ranks/" + std::to_string(rank) + ".log");
    size_t start = log.find('{');
    REQUIRE(start != std::string::npos);
    nlohmann::json vars = nlohmann::json::parse(log.substr(start, log.find('\n', start) - start));
    CHECK(vars["RANK"] == std::to_string(rank));
    CHECK(vars["LOCAL_RANK"] == std::to_string(rank));
    CHECK(vars["WORLD_SIZE"] == "2");
    CHECK(vars["LOCAL_WORLD_SIZE"] == "2");
    CHECK(vars["GROUP_RANK"] == "0");
    CHECK(vars["MASTER_ADDR"] == "127.0.0.1");
    CHECK(std::stoi(vars["MASTER_PORT"].get<std::string>()) > 0);
    CHECK(vars["TORCHELASTIC_RESTART_COUNT"] == "0");
    CHECK(vars["OMP_NUM_THREADS"] == "1");
    CHECK(vars["DTRAIN_GENERATION"] == "0");
    CHECK(vars["ROLE_NAME"] == "default");
    CHECK(vars["MY_VAR"] == "x y");
    CHECK(vars["DTRAIN_RUN_ID"] == run_id_of(dir));
    CHECK(!vars["DTRAIN_AGENT_SOCKET"].get<std::string>().empty());
  }
}

TEST_CASE("a command that cannot be executed fails the run with a clear reason") {
  DtrainEnv env;
  std::string spec = env.write_spec("noexec.yaml", spec_with_command("noexec", 1, "[/nonexistent/trainer, --x]"));
  DtrainProcess process = env.run({"submit", spec});
  CHECK(process.exit_code == 1);
  CHECK(process.err().find("/nonexistent/trainer") != std::string::npos);
}

TEST_CASE("an invalid spec is refused before anything starts, with exit 2") {
  DtrainEnv env;
  std::string spec = env.write_spec("bad.yaml", "version: 1\nworker:\n  command: [x]\nhearbeat: {}\n");
  DtrainProcess process = env.run({"submit", spec});
  CHECK(process.exit_code == 2);
  CHECK(process.err().find("did you mean 'heartbeat'") != std::string::npos);
  CHECK(env.run_dirs().empty());
}

TEST_CASE("--detach returns the run id and status, logs --follow and stop work on it") {
  DtrainEnv env;
  std::string spec = env.write_spec(
      "detach.yaml",
      spec_with_command("detach", 2, "[/bin/sh, -c, 'i=0; while true; do echo tick $i; i=$((i+1)); sleep 0.2; done']"));
  DtrainProcess submitted = env.run({"submit", spec, "--detach"}, 30000);
  REQUIRE(submitted.exit_code == 0);
  std::string run_id = std::string(dtrain::testing::read_text(submitted.out_path));
  run_id = run_id.substr(0, run_id.find('\n'));
  REQUIRE(!run_id.empty());
  std::string dir = env.home() + "/runs/" + run_id;
  REQUIRE(wait_until([&] { return read_text(dir + "/ranks/1.log").find("tick 2") != std::string::npos; }, 30000));

  DtrainProcess status = env.run({"status", run_id.substr(0, run_id.size() - 2)}, 30000);
  CHECK(status.exit_code == 0);
  CHECK(status.out().find("running") != std::string::npos);

  DtrainProcess follow = env.start({"logs", run_id, "--follow"});
  REQUIRE(wait_until([&] { return follow.out().find("[rank 1] tick") != std::string::npos; }, 20000));

  DtrainProcess stop = env.run({"stop", run_id}, 60000);
  CHECK(stop.exit_code == 0);
  CHECK(follow.wait(20000));
  CHECK(follow.exit_code == 0);
  nlohmann::json state = nlohmann::json::parse(read_text(dir + "/state.json"));
  CHECK(state["state"] == "stopped");
  CHECK(state["exit_code"] == 130);
  check_nothing_left(run_id);
}

TEST_CASE("the quickstart spec trains, checkpoints and logs the expected event sequence") {
  DtrainEnv env;
  DtrainProcess process = env.run({"submit", std::string(DTRAIN_SOURCE_DIR) + "/configs/quickstart.yaml"}, 180000);
  REQUIRE(process.exit_code == 0);
  std::string dir = env.run_dirs().at(0);
  auto events = read_events(dir + "/events.jsonl");
  std::vector<std::string> order = {"run.submitted", "host.connected", "plan.generation",
                                    "generation.spawned", "worker.started", "checkpoint.committed",
                                    "worker.exit", "resources.released", "run.finished"};
  size_t position = 0;
  for (const auto& event : events) {
    if (position < order.size() && event.value("ev", "") == order[position]) ++position;
  }
  CHECK_MESSAGE(position == order.size(), "missing " << (position < order.size() ? order[position] : ""));
  CHECK(events_named(events, "worker.started").size() == 4);
  CHECK(events_named(events, "checkpoint.committed").size() == 4);  // steps 50, 100, 150, 200
  nlohmann::json state = nlohmann::json::parse(read_text(dir + "/state.json"));
  for (const auto& rank : state["ranks"]) {
    CHECK(rank["step"] == 200);
    CHECK(rank["loss"].get<double>() < 1.0);  // starts near ln(10) ≈ 2.3–3.2
  }
  CHECK(read_text(dir + "/metrics.jsonl").find("\"step\"") != std::string::npos);
  check_nothing_left(run_id_of(dir));
}

TEST_CASE("a Python worker using worker/python/dtrain_worker.py beats and the supervisor sees its step") {
  DtrainEnv env;
  std::string script = env.dir.path + "/train.py";
  write_text(script,
             "import sys, time\n"
             "sys.path.insert(0, '" + std::string(DTRAIN_SOURCE_DIR) + "/worker/python')\n"
             "from dtrain_worker import Worker\n"
             "w = Worker.from_env()\n"
             "for step in range(1, 31):\n"
             "    time.sleep(0.01)\n"
             "    w.beat(step, loss=1.0 / step)\n"
             "w.beat(30, final=True, loss=1.0 / 30)\n"
             "w.close()\n");
  std::string spec = env.write_spec("py.yaml", spec_with_command("py", 2, "[python3, " + script + "]"));
  DtrainProcess process = env.run({"submit", spec});
  REQUIRE(process.exit_code == 0);
  nlohmann::json state = nlohmann::json::parse(read_text(env.run_dirs().at(0) + "/state.json"));
  for (const auto& rank : state["ranks"]) {
    CHECK(rank["step"] == 30);
    CHECK(rank["last_beat_ms"].is_number());
  }
}

TEST_CASE("a burst of NCCL WARN lines is one event at once and one with the count, every line in the log") {
  DtrainEnv env;
  std::string spec = env.write_spec(
      "warn.yaml", spec_with_command("warn", 2,
                                     "[/bin/sh, -c, 'if [ $RANK = 1 ]; then i=0; while [ $i -lt 300 ]; do "
                                     "echo \"gpu01:1:2 [0] NCCL WARN NET/Socket : peer closed $i\"; i=$((i+1)); done; fi']"));
  DtrainProcess process = env.run({"submit", spec});
  CHECK(process.exit_code == 0);
  std::string dir = env.run_dirs().at(0);
  auto warns = events_named(read_events(dir + "/events.jsonl"), "comm.warn");
  REQUIRE(warns.size() == 2);
  CHECK(warns[0]["rank"] == 1);
  CHECK(warns[0]["line"].get<std::string>().find("peer closed 0") != std::string::npos);
  CHECK_FALSE(warns[0].contains("repeated"));
  CHECK(warns[1]["repeated"] == 299);
  CHECK(warns[1]["line"].get<std::string>().find("peer closed 299") != std::string::npos);
  std::string log = read_text(dir + "/ranks/1.log");
  CHECK(log.find("peer closed 0\n") != std::string::npos);
  CHECK(log.find("peer closed 299\n") != std::string::npos);
  check_nothing_left(run_id_of(dir));
}
