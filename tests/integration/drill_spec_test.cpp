// `dtrain drill --spec drill.yaml`: the drill starts its own job, injects, lets it finish,
// grades, and cleans up; slow-storage is drilled this way, and kill-supervisor (SIGKILL of the
// supervisor, the agents fence, `dtrain resume` finishes the run with the same final parameters
// as an uninterrupted run). A bad drill spec is a usage error.

#include <doctest/doctest.h>

#include "tests/integration/dtrain_runner.h"

using namespace dtrain::testing;
using nlohmann::json;

namespace {

std::string trainer_job(const std::string& name, int steps) {
  return "version: 1\nname: " + name +
         "\nslots_per_host: 2\n"
         "worker:\n  command: [dtrain-train, --steps, \"" + std::to_string(steps) + "\", --log-every, \"100\"]\n"
         "  backend: gloo\n"
         "batch: {global: 32, micro: 8}\n"
         "checkpoint: {interval_steps: 50, keep: 3}\n"
         "heartbeat: {interval: 200ms, timeout: 2s, hang_timeout: 3s}\n"
         "stop_grace: 2s\n";
}

std::string final_line(const std::string& log) {
  size_t at = log.rfind("dtrain-train: final");
  return at == std::string::npos ? "" : log.substr(at, log.find('\n', at) - at);
}

}  // namespace

TEST_CASE("--spec: a kill-rank drill runs the job to its end and passes, leaving nothing behind") {
  DtrainEnv env;
  env.write_spec("job.yaml", trainer_job("specdrill", 1500));
  std::string drill_spec = env.write_spec(
      "drill.yaml",
      "version: 1\njob: job.yaml\nset: {elastic.max_restarts: 3}\ntimeout: 3m\n"
      "faults:\n  - {fault: kill-rank, target: 1, at_step: 200}\n"
      "objectives: {detect: 10s, recover: 60s, max_lost_steps: 200}\n");
  DtrainProcess drill = env.run({"drill", "--spec", drill_spec, "--json"}, 200000);
  json verdict = json::parse(drill.out(), nullptr, false);
  REQUIRE_MESSAGE(verdict.is_object(), drill.out() << drill.err());
  CHECK_MESSAGE(drill.exit_code == 0, verdict.dump(2) << drill.err());
  CHECK(verdict["mode"] == "spec");
  CHECK(verdict["final_state"] == "succeeded");
  CHECK(verdict["leftover_pids"].empty());
  REQUIRE(verdict["faults"].size() == 1);
  json fault = verdict["faults"][0];
  CHECK(fault["at_step"].get<int64_t>() >= 200);
  CHECK(fault["steps_lost"].get<int64_t>() <= 200);
  std::string run_id = verdict["run_id"];
  CHECK(processes_of_run(run_id).empty());
  auto events = read_events(env.home() + "/runs/" + run_id + "/events.jsonl");
  CHECK(events_named(events, "drill.injected").size() == 1);
  CHECK(events_named(events, "drill.verdict").size() == 1);
  auto finished = events_named(events, "run.finished");
  REQUIRE(finished.size() == 1);
  CHECK(finished[0]["state"] == "succeeded");
}

TEST_CASE("--spec slow-storage: checkpoints still commit, slowly, and training reaches its end") {
  DtrainEnv env;
  env.write_spec("job.yaml", trainer_job("slowdrill", 300));
  std::string drill_spec = env.write_spec(
      "drill.yaml",
      "version: 1\njob: job.yaml\ntimeout: 2m\nfaults: [{fault: slow-storage, delay: 400ms}]\n"
      "objectives: {max_lost_steps: 0}\n");
  DtrainProcess drill = env.run({"drill", "--spec", drill_spec, "--json"}, 150000);
  json verdict = json::parse(drill.out(), nullptr, false);
  REQUIRE_MESSAGE(verdict.is_object(), drill.out() << drill.err());
  CHECK_MESSAGE(drill.exit_code == 0, verdict.dump(2) << drill.err());
  REQUIRE(verdict["faults"].size() == 1);
  json fault = verdict["faults"][0];
  CHECK(fault["fault"] == "slow-storage");
  CHECK(fault["delay_ms"] == 400);
  CHECK(fault["last_step"].get<int64_t>() == 300);
  std::string run_id = verdict["run_id"];
  // The hook was live: the committed checkpoints took at least the delay.
  for (const json& commit : events_named(read_events(env.home() + "/runs/" + run_id + "/events.jsonl"),
                                         "checkpoint.committed")) {
    CHECK(commit["seconds"].get<double>() >= 0.4);
  }
  CHECK(processes_of_run(run_id).empty());
}

TEST_CASE("--spec with a broken drill spec is a usage error naming the line") {
  DtrainEnv env;
  std::string bad = env.write_spec("bad.yaml", "version: 1\njob: missing.yaml\nfaults:\n  - {fault: kill-rank, at_step: x}\n");
  DtrainProcess drill = env.run({"drill", "--spec", bad}, 30000);
  CHECK(drill.exit_code == 2);
  CHECK(drill.err().find("bad.yaml:2:") != std::string::npos);
  CHECK(drill.err().find("bad.yaml:4:") != std::string::npos);
  CHECK(env.run_dirs().empty());
}

TEST_CASE("--spec kill-supervisor: the agents fence, dtrain resume finishes the run bit-identical, nothing is left") {
  constexpr int kSteps = 1500;
  std::string expected;
  {
    DtrainEnv reference;
    DtrainProcess run = reference.run({"submit", reference.write_spec("ref.yaml", trainer_job("supref", kSteps))}, 120000);
    REQUIRE(run.exit_code == 0);
    expected = final_line(read_text(reference.run_dirs().at(0) + "/ranks/0.log"));
  }
  REQUIRE(!expected.empty());

  DtrainEnv env;
  env.write_spec("job.yaml", trainer_job("supdrill", kSteps));
  std::string drill_spec = env.write_spec(
      "drill.yaml",
      "version: 1\njob: job.yaml\ntimeout: 4m\n"
      "faults:\n  - {fault: kill-supervisor, at_step: 300}\n"
      "objectives: {detect: 7s, recover: 60s, max_lost_steps: 200}\n");
  DtrainProcess drill = env.run({"drill", "--spec", drill_spec, "--json"}, 260000);
  json verdict = json::parse(drill.out(), nullptr, false);
  REQUIRE_MESSAGE(verdict.is_object(), drill.out() << drill.err());
  CHECK_MESSAGE(drill.exit_code == 0, verdict.dump(2) << drill.err());
  CHECK(verdict["verdict"] == "pass");
  CHECK(verdict["final_state"] == "succeeded");
  CHECK(verdict["leftover_pids"].empty());
  REQUIRE(verdict["faults"].size() == 1);
  json fault = verdict["faults"][0];
  MESSAGE("kill-supervisor: detect_ms=" << fault["detect_ms"] << " recover_ms=" << fault["recover_ms"]
                                        << " steps_lost=" << fault["steps_lost"] << " phases=" << fault["phases"].dump());
  CHECK(fault["fault"] == "kill-supervisor");
  CHECK(fault["detected_by"] == "agents fenced");
  CHECK(fault["recover_ms"].get<int64_t>() >= fault["detect_ms"].get<int64_t>());
  CHECK(fault["steps_lost"].get<int64_t>() <= 200);

  std::string run_id = verdict["run_id"];
  std::string dir = env.home() + "/runs/" + run_id;
  auto events = read_events(dir + "/events.jsonl");
  auto injected = events_named(events, "drill.injected");
  REQUIRE(injected.size() == 1);
  auto resumed = events_named(events, "run.resumed");
  REQUIRE(resumed.size() == 1);
  // The drill killed the supervisor that the run log named, and the resumed one is another.
  CHECK(resumed[0]["previous_supervisor_pid"] == injected[0]["pid"]);
  auto finished = events_named(events, "run.finished");
  REQUIRE(finished.size() == 1);
  CHECK(finished[0]["state"] == "succeeded");
  CHECK(final_line(read_text(dir + "/ranks/0.log")) == expected);
  CHECK(final_line(read_text(dir + "/ranks/1.log")) == expected);
  CHECK(events_named(events, "drill.verdict").size() == 1);
  CHECK(wait_until([&] { return processes_of_run(run_id).empty(); }, 10000));
  CHECK(process_gone(injected[0]["pid"].get<int>()));
}
