// `dtrain drill RUN --fault ...` against a live run of the reference trainer: each fault kind
// that the embedded localhost default can take ends with a pass verdict; an impossible
// objective ends with a fail verdict and exit 1 naming it; a run that does not exist or has
// ended is refused with exit 2; --history lists the drills. Nothing of a run survives a test.

#include <doctest/doctest.h>

#include "tests/integration/dtrain_runner.h"

using namespace dtrain::testing;
using nlohmann::json;

namespace {

// Long enough never to finish during a test (each test stops its run); checkpoints every 25
// steps so that a corrupt-checkpoint drill soon has two; hang_timeout 3s bounds a hang drill.
std::string endless_trainer_spec(const std::string& name) {
  return "version: 1\nname: " + name +
         "\nslots_per_host: 2\n"
         "worker:\n  command: [dtrain-train, --steps, \"1000000\", --log-every, \"1000\"]\n  backend: gloo\n"
         "batch: {global: 32, micro: 8}\n"
         "checkpoint: {interval_steps: 25, keep: 4}\n"
         "heartbeat: {interval: 200ms, timeout: 2s, hang_timeout: 3s}\n"
         "elastic: {max_restarts: 10}\n"
         "stop_grace: 2s\n";
}

/// A detached run of the endless trainer; stopped, and proven gone, at the end of the test.
struct LiveRun {
  DtrainEnv& env;
  std::string id;
  explicit LiveRun(DtrainEnv& environment, const std::string& name) : env(environment) {
    DtrainProcess submit = env.run({"submit", env.write_spec(name + ".yaml", endless_trainer_spec(name)), "--detach"}, 60000);
    REQUIRE(submit.exit_code == 0);
    id = submit.out().substr(0, submit.out().find('\n'));
    REQUIRE(!id.empty());
  }
  LiveRun(const LiveRun&) = delete;
  LiveRun& operator=(const LiveRun&) = delete;
  // A test that stopped early (a failed REQUIRE) must not leave its run training.
  ~LiveRun() {
    if (!stopped && !id.empty()) env.run({"stop", id}, 60000);
  }
  std::string dir() const { return env.home() + "/runs/" + id; }
  void stop() {
    stopped = true;
    DtrainProcess stop_process = env.run({"stop", id}, 60000);
    CHECK(stop_process.exit_code == 0);
    CHECK(wait_until([&] { return processes_of_run(id).empty(); }, 10000));
  }
  bool stopped = false;
};

json parse_verdict(const DtrainProcess& drill) {
  json verdict = json::parse(drill.out(), nullptr, false);
  REQUIRE_MESSAGE(verdict.is_object(), "stdout: " << drill.out() << "\nstderr: " << drill.err());
  return verdict;
}

json logged_verdict(const std::string& run_dir, size_t index) {
  auto verdicts = events_named(read_events(run_dir + "/events.jsonl"), "drill.verdict");
  REQUIRE(verdicts.size() > index);
  return verdicts[index];
}

}  // namespace

TEST_CASE("kill-rank passes, an impossible objective fails naming it, an ended run is refused, --history lists drills") {
  DtrainEnv env;
  LiveRun run(env, "drillkill");

  DtrainProcess drill = env.run({"drill", run.id, "--fault", "kill-rank:1", "--detect", "10s", "--recover", "60s",
                                 "--max-lost-steps", "1000", "--json"}, 120000);
  json verdict = parse_verdict(drill);
  CHECK_MESSAGE(drill.exit_code == 0, drill.out() << drill.err());
  CHECK(verdict["verdict"] == "pass");
  REQUIRE(verdict["faults"].size() == 1);
  json fault = verdict["faults"][0];
  CHECK(fault["fault"] == "kill-rank");
  CHECK(fault["detected_by"] == "worker.exit");
  CHECK(fault["detected_rank"] == 1);
  CHECK(fault["resources_released"] == true);
  CHECK(fault["final_state"] == "running");
  CHECK(fault["recover_ms"].get<int64_t>() >= fault["detect_ms"].get<int64_t>());
  for (const json& objective : fault["objectives"]) CHECK(objective["met"] == true);
  int victim = fault["pid"].get<int>();
  CHECK(process_gone(victim));
  // The run's own log tells the same story, in order.
  auto events = read_events(run.dir() + "/events.jsonl");
  auto injected = events_named(events, "drill.injected");
  REQUIRE(injected.size() == 1);
  CHECK(injected[0]["pid"] == victim);
  CHECK(logged_verdict(run.dir(), 0)["verdict"] == "pass");

  DtrainProcess tight = env.run({"drill", run.id, "--fault", "kill-rank:0", "--recover", "1ms"}, 120000);
  CHECK(tight.exit_code == 1);
  CHECK_MESSAGE(tight.out().find("recover (limit 1ms from the drill spec, measured ") != std::string::npos, tight.out());
  CHECK(tight.out().find("verdict: FAIL") != std::string::npos);
  CHECK(logged_verdict(run.dir(), 1)["verdict"] == "fail");

  DtrainProcess history = env.run({"drill", "--history"}, 30000);
  CHECK(history.exit_code == 0);
  CHECK(history.out().find("kill-rank:1") != std::string::npos);
  CHECK(history.out().find("kill-rank:0") != std::string::npos);
  CHECK(history.out().find("recover (limit 1ms") != std::string::npos);
  DtrainProcess history_json = env.run({"drill", "--history", "--json"}, 30000);
  json entries = json::parse(history_json.out(), nullptr, false);
  REQUIRE(entries.is_array());
  CHECK(entries.size() == 2);

  run.stop();
  DtrainProcess ended = env.run({"drill", run.id, "--fault", "kill-rank:1"}, 30000);
  CHECK(ended.exit_code == 2);
  CHECK(ended.err().find("has ended (stopped") != std::string::npos);
  CHECK(processes_of_run(run.id).empty());

  // Each drill is one audit row: which fault went into which run, and the verdict.
  DtrainProcess audit = env.run({"audit", "--action", "drill", "--json"}, 30000);
  INFO(audit.err());
  REQUIRE(audit.exit_code == 0);
  json rows = json::parse(audit.out(), nullptr, false)["rows"];
  REQUIRE(rows.is_array());
  REQUIRE(rows.size() == 3);
  CHECK(rows[0]["run"] == run.id);
  CHECK(rows[0]["target"] == "kill-rank:1");
  CHECK(rows[0]["result"] == "pass");
  CHECK(rows[1]["target"] == "kill-rank:0");
  CHECK(rows[1]["result"] == "fail");
  CHECK(rows[2]["result"].get<std::string>().rfind("error: ", 0) == 0);
}

TEST_CASE("hang-rank: a SIGSTOPped worker is detected by its heartbeats and replaced, the drill passes") {
  DtrainEnv env;
  LiveRun run(env, "drillhang");
  DtrainProcess drill = env.run({"drill", run.id, "--fault", "hang-rank:1", "--detect", "10s", "--recover", "60s",
                                 "--json"}, 120000);
  json verdict = parse_verdict(drill);
  CHECK_MESSAGE(drill.exit_code == 0, drill.out() << drill.err());
  json fault = verdict["faults"][0];
  CHECK(fault["detected_by"] == "worker.hang");
  CHECK(fault["detected_rank"] == 1);
  // Detected by the heartbeat watch, after the 3s hang_timeout counted from the worker's last
  // beat, which came at most one 200ms interval (plus scheduling) before the SIGSTOP.
  CHECK(fault["detect_ms"].get<int64_t>() >= 2500);
  CHECK(process_gone(fault["pid"].get<int>()));
  run.stop();
  CHECK(processes_of_run(run.id).empty());
}

TEST_CASE("corrupt-checkpoint: the damaged newest checkpoint is rejected and the run resumes from the one before") {
  DtrainEnv env;
  LiveRun run(env, "drillcorrupt");
  DtrainProcess drill = env.run({"drill", run.id, "--fault", "corrupt-checkpoint:1", "--recover", "60s", "--json"},
                                120000);
  json verdict = parse_verdict(drill);
  json fault = verdict["faults"][0];
  CHECK(fault.contains("corrupted_step"));
  CHECK_MESSAGE(drill.exit_code == 0, verdict.dump(2));
  CHECK(verdict["verdict"] == "pass");
  if (fault["resume_step"].is_number()) CHECK(fault["resume_step"].get<int64_t>() < fault["corrupted_step"].get<int64_t>());
  run.stop();
  CHECK(processes_of_run(run.id).empty());
}

TEST_CASE("a drill against a run that does not exist exits 2, and so does a partition without a method") {
  DtrainEnv env;
  DtrainProcess missing = env.run({"drill", "no-such-run", "--fault", "kill-rank:1"}, 30000);
  CHECK(missing.exit_code == 2);
  CHECK(missing.err().find("no run 'no-such-run'") != std::string::npos);

  DtrainProcess typo = env.run({"drill", "x", "--fault", "kill-rnak:1"}, 30000);
  CHECK(typo.exit_code == 2);
  CHECK(typo.err().find("did you mean 'kill-rank'") != std::string::npos);

  // The firewall is never the default: without an opt-in or commands, partition-host says how.
  DtrainProcess no_method = env.run({"drill", "x", "--fault", "partition-host:gpu02"}, 30000);
  CHECK(no_method.exit_code == 2);
  CHECK(no_method.err().find("--allow-firewall") != std::string::npos);
  CHECK(no_method.err().find("--cut-command") != std::string::npos);
  DtrainProcess half = env.run({"drill", "x", "--fault", "partition-host:gpu02", "--cut-command", "down {host}"}, 30000);
  CHECK(half.exit_code == 2);
  CHECK(half.err().find("heal command is missing") != std::string::npos);
  DtrainProcess stray = env.run({"drill", "x", "--fault", "kill-host:gpu02", "--allow-firewall"}, 30000);
  CHECK(stray.exit_code == 2);
  CHECK(stray.err().find("only partition-host") != std::string::npos);
  for (std::string kind : {"kill-host:gpu02", "kill-supervisor"}) {
    DtrainProcess no_run = env.run({"drill", "no-such-run", "--fault", kind}, 30000);
    CHECK(no_run.exit_code == 2);
    CHECK(no_run.err().find("no run 'no-such-run'") != std::string::npos);
  }
  DtrainProcess nothing = env.run({"drill"}, 30000);
  CHECK(nothing.exit_code == 2);
}

TEST_CASE("kill-host of a host the run does not have is refused with exit 2 naming its hosts") {
  DtrainEnv env;
  LiveRun run(env, "drillnohost");
  DtrainProcess drill = env.run({"drill", run.id, "--fault", "kill-host:gpu99"}, 30000);
  CHECK(drill.exit_code == 2);
  CHECK_MESSAGE(drill.err().find("has no host 'gpu99'; its hosts are localhost") != std::string::npos, drill.err());
  run.stop();
}
