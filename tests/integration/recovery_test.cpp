// Recovery on the embedded localhost default with the reference trainer: a killed worker is
// restarted in place from the newest checkpoint and the run ends bit-identical to an
// uninterrupted one; a stopped (SIGSTOP) worker is found by its heartbeats, sampled and
// replaced; a worker that always crashes ends as a crash loop. Nothing of the run survives.

#include <doctest/doctest.h>

#include <signal.h>

#include "tests/integration/dtrain_runner.h"

using namespace dtrain::testing;

namespace {

std::string trainer_spec(const std::string& name, int steps, const std::string& extra = "") {
  return "version: 1\nname: " + name +
         "\nslots_per_host: 2\n"
         "worker:\n  command: [dtrain-train, --steps, \"" + std::to_string(steps) +
         "\", --log-every, \"50\"]\n  backend: gloo\n"
         "batch: {global: 32, micro: 8}\n"
         "checkpoint: {interval_steps: 50, keep: 3}\n"
         "heartbeat: {interval: 200ms, timeout: 2s, hang_timeout: 3s}\n"
         "stop_grace: 2s\n" + extra;
}

std::string final_line(const std::string& log) {
  size_t at = log.rfind("dtrain-train: final");
  return at == std::string::npos ? "" : log.substr(at, log.find('\n', at) - at);
}

/// The final-parameters line of rank 0 in a fault-free run of `steps` steps.
std::string uninterrupted_final_line(int steps) {
  DtrainEnv env;
  DtrainProcess reference = env.run({"submit", env.write_spec("ref.yaml", trainer_spec("ref", steps))});
  if (reference.exit_code != 0 || env.run_dirs().empty()) return "";
  return final_line(read_text(env.run_dirs().at(0) + "/ranks/0.log"));
}

bool checkpoint_committed_at_least(const std::string& run_dir, int step) {
  for (const auto& event : events_named(read_events(run_dir + "/events.jsonl"), "checkpoint.committed")) {
    if (event.value("step", 0) >= step) return true;
  }
  return false;
}

}  // namespace

TEST_CASE("kill -9 of one worker: restart in place, same final parameters as an uninterrupted run") {
  std::string expected = uninterrupted_final_line(400);
  REQUIRE(!expected.empty());

  DtrainEnv env;
  DtrainProcess run = env.start({"submit", env.write_spec("kill.yaml", trainer_spec("kill", 400)),
                                 "--set", "elastic.max_restarts=2"});
  std::string dir = only_run_dir(env);
  REQUIRE(!dir.empty());
  REQUIRE(wait_until([&] { return checkpoint_committed_at_least(dir, 100); }, 60000));
  int victim = rank_pid(dir, 1);
  REQUIRE(victim > 0);
  REQUIRE(::kill(victim, SIGKILL) == 0);
  REQUIRE(run.wait(120000));
  CHECK(run.exit_code == 0);

  auto events = read_events(dir + "/events.jsonl");
  auto detected = events_named(events, "failure.detected");
  REQUIRE(detected.size() == 1);
  CHECK(detected[0]["signal"] == "SIGKILL");
  CHECK(detected[0]["rank"] == 1);
  auto completed = events_named(events, "recovery.completed");
  REQUIRE(completed.size() == 1);
  CHECK(completed[0]["resume_step"].get<int>() >= 100);
  CHECK(completed[0]["phases"].contains("stop_ms"));
  CHECK(completed[0]["phases"].contains("first_step_ms"));
  CHECK(!events_named(events, "resources.released").empty());
  CHECK(final_line(read_text(dir + "/ranks/0.log")) == expected);
  CHECK(final_line(read_text(dir + "/ranks/1.log")) == expected);
  CHECK(processes_of_run(run_id_of(dir)).empty());
}

TEST_CASE("a stopped worker is detected by its heartbeats, sampled, and the run recovers") {
  DtrainEnv env;
  DtrainProcess run = env.start({"submit", env.write_spec("hang.yaml", trainer_spec("hang", 400)),
                                 "--set", "elastic.max_restarts=2"});
  std::string dir = only_run_dir(env);
  REQUIRE(wait_until([&] { return checkpoint_committed_at_least(dir, 50); }, 60000));
  int victim = rank_pid(dir, 1);
  REQUIRE(victim > 0);
  REQUIRE(::kill(victim, SIGSTOP) == 0);
  REQUIRE(run.wait(120000));
  CHECK(run.exit_code == 0);

  auto events = read_events(dir + "/events.jsonl");
  auto hangs = events_named(events, "worker.hang");
  REQUIRE(hangs.size() == 1);
  CHECK(hangs[0]["rank"] == 1);
  // The supervisor's own measure: silent about hang_timeout (3s; the stopped rank may have
  // beaten up to two intervals after the peer that crossed first), noticed within one heartbeat
  // interval (200ms) plus its 100ms tick.
  CHECK(hangs[0]["silent_ms"].get<int>() > 3000 - 2 * 200);
  CHECK(hangs[0]["silent_ms"].get<int>() <= 3000 + 200 + 100 + 200);
  auto samples = events_named(events, "worker.sample");
  REQUIRE(samples.size() == 1);
  std::string sample = read_text(samples[0]["path"].get<std::string>());
  CHECK(sample.find("State:\tT") != std::string::npos);
  CHECK(sample.find("== kernel stack") != std::string::npos);
  CHECK(events_named(events, "recovery.completed").size() == 1);
  CHECK(processes_of_run(run_id_of(dir)).empty());
  CHECK(process_gone(victim));
}

TEST_CASE("a worker that always crashes ends the run as a crash loop with its own exit code") {
  DtrainEnv env;
  std::string spec = env.write_spec(
      "loop.yaml",
      "version: 1\nname: loop\nslots_per_host: 2\n"
      "worker:\n  command: [/bin/sh, -c, 'echo cannot open dataset >&2; exit 7']\n"
      "elastic: {max_restarts: 10}\n"
      "heartbeat: {interval: 200ms, timeout: 3s, hang_timeout: 10s}\nstop_grace: 1s\n");
  DtrainProcess run = env.run({"submit", spec}, 120000);
  CHECK(run.exit_code == 4);
  CHECK(run.err().find("crashed") == std::string::npos);  // no internal crash text
  CHECK(run.err().find("exit code 7") != std::string::npos);
  std::string dir = env.run_dirs().at(0);
  auto events = read_events(dir + "/events.jsonl");
  CHECK(events_named(events, "failure.crash_loop").size() == 1);
  CHECK(events_named(events, "plan.generation").size() == 3);
  nlohmann::json state = nlohmann::json::parse(read_text(dir + "/state.json"));
  CHECK(state["exit_code"] == 4);
  CHECK(processes_of_run(run_id_of(dir)).empty());
}

TEST_CASE("kill -9 of the supervisor: agents fence, dtrain resume finishes with the same final parameters") {
  std::string expected = uninterrupted_final_line(400);
  REQUIRE(!expected.empty());

  DtrainEnv env;
  DtrainProcess run = env.start({"submit", env.write_spec("sup.yaml", trainer_spec("sup", 400))});
  std::string dir = only_run_dir(env);
  REQUIRE(!dir.empty());
  std::string run_id = run_id_of(dir);
  REQUIRE(wait_until([&] { return checkpoint_committed_at_least(dir, 100); }, 60000));
  std::vector<int> workers = processes_of_run(run_id);
  REQUIRE(!workers.empty());
  REQUIRE(::kill(run.pid, SIGKILL) == 0);
  REQUIRE(run.wait(10000));
  // The agents fence themselves (stdin EOF): every worker is gone without anyone's help.
  CHECK(wait_until([&] { return processes_of_run(run_id).empty(); }, 10000));

  DtrainProcess gone = env.run({"status", run_id}, 30000);
  CHECK(gone.out().find("dtrain resume " + run_id) != std::string::npos);

  DtrainProcess resumed = env.run({"resume", run_id.substr(0, run_id.size() - 2)}, 120000);
  CHECK(resumed.exit_code == 0);
  CHECK(resumed.err().find("resuming run " + run_id) != std::string::npos);

  auto events = read_events(dir + "/events.jsonl");
  auto resumes = events_named(events, "run.resumed");
  REQUIRE(resumes.size() == 1);
  CHECK(resumes[0]["previous_state"] != "succeeded");
  int64_t resume_step = resumes[0]["resume_step"].get<int64_t>();
  CHECK(resume_step >= 100);
  auto detected = events_named(events, "failure.detected");
  REQUIRE(detected.size() == 1);
  CHECK(detected[0]["kind"] == "supervisor.lost");
  auto completed = events_named(events, "recovery.completed");
  REQUIRE(completed.size() == 1);
  CHECK(completed[0]["kind"] == "supervisor.lost");
  CHECK(completed[0]["resume_step"] == resume_step);
  CHECK(completed[0]["phases"].contains("first_step_ms"));
  // Generations go on from where the dead supervisor stopped; nothing is overwritten.
  auto plans = events_named(events, "plan.generation");
  REQUIRE(plans.size() == 2);
  CHECK(plans[1]["gen"] == plans[0]["gen"].get<int>() + 1);
  CHECK(events_named(events, "run.finished").size() == 1);
  nlohmann::json state = nlohmann::json::parse(read_text(dir + "/state.json"));
  CHECK(state["state"] == "succeeded");
  CHECK(state["resumed_at_ms"].is_number());
  CHECK(env.run({"status", run_id}, 30000).out().find("by `dtrain resume`") != std::string::npos);
  CHECK(final_line(read_text(dir + "/ranks/0.log")) == expected);
  CHECK(final_line(read_text(dir + "/ranks/1.log")) == expected);
  CHECK(processes_of_run(run_id).empty());
  for (int pid : workers) CHECK(process_gone(pid));

  // Finished now: a second resume is refused, and says why.
  DtrainProcess again = env.run({"resume", run_id}, 30000);
  CHECK(again.exit_code == 2);
  CHECK(again.err().find("already succeeded") != std::string::npos);
}

TEST_CASE("dtrain resume refuses a run that does not exist or still has its supervisor") {
  DtrainEnv env;
  DtrainProcess missing = env.run({"resume", "no-such-run"}, 30000);
  CHECK(missing.exit_code == 2);
  CHECK(missing.err().find("no-such-run") != std::string::npos);

  DtrainProcess run = env.start({"submit", env.write_spec("live.yaml", trainer_spec("live", 100000))});
  std::string dir = only_run_dir(env);
  REQUIRE(!dir.empty());
  REQUIRE(wait_until([&] { return rank_pid(dir, 1) > 0; }, 60000));
  DtrainProcess refused = env.run({"resume", run_id_of(dir)}, 30000);
  CHECK(refused.exit_code == 2);
  CHECK(refused.err().find("still supervised by pid " + std::to_string(run.pid)) != std::string::npos);
  ::kill(run.pid, SIGTERM);
  REQUIRE(run.wait(60000));
  CHECK(processes_of_run(run_id_of(dir)).empty());
}

TEST_CASE("a stopped run is continued by dtrain resume without a failure, and ends as an uninterrupted one") {
  std::string expected = uninterrupted_final_line(400);
  REQUIRE(!expected.empty());
  DtrainEnv env;
  DtrainProcess run = env.start({"submit", env.write_spec("stop.yaml", trainer_spec("stop", 400))});
  std::string dir = only_run_dir(env);
  REQUIRE(!dir.empty());
  std::string run_id = run_id_of(dir);
  REQUIRE(wait_until([&] { return checkpoint_committed_at_least(dir, 100); }, 60000));
  DtrainProcess stop = env.run({"stop", run_id}, 60000);
  CHECK(stop.exit_code == 0);
  REQUIRE(run.wait(60000));
  CHECK(run.exit_code == 130);

  DtrainProcess resumed = env.run({"resume", run_id}, 120000);
  CHECK(resumed.exit_code == 0);
  CHECK(resumed.err().find("it had stopped") != std::string::npos);
  auto events = read_events(dir + "/events.jsonl");
  CHECK(events_named(events, "failure.detected").empty());
  auto resumes = events_named(events, "run.resumed");
  REQUIRE(resumes.size() == 1);
  CHECK(resumes[0]["previous_state"] == "stopped");
  CHECK(final_line(read_text(dir + "/ranks/0.log")) == expected);
  CHECK(processes_of_run(run_id).empty());
}

TEST_CASE("a script that reports no steps, killed three times after training a while, is no crash loop") {
  // A worker that never speaks the worker protocol: its progress can only be told by how long
  // each generation ran (elastic.progress_window). Each generation runs past the window before
  // rank 1 is killed; the fourth one finishes.
  DtrainEnv env;
  std::string spec = env.write_spec(
      "plain.yaml",
      "version: 1\nname: plain\nslots_per_host: 2\n"
      "worker:\n  command: [/bin/sh, -c, 'if [ \"$TORCHELASTIC_RESTART_COUNT\" -ge 3 ]; then exit 0; fi; exec sleep 60']\n"
      "elastic: {max_restarts: 10, progress_window: 1s}\n"
      "heartbeat: {interval: 200ms, timeout: 2s, hang_timeout: 3s}\nstop_grace: 1s\n");
  DtrainProcess run = env.start({"submit", spec});
  std::string dir = only_run_dir(env);
  REQUIRE(!dir.empty());
  for (int gen = 0; gen < 3; ++gen) {
    int victim = 0;
    int64_t started_at = 0;
    REQUIRE(wait_until([&] {
      for (const auto& event : events_named(read_events(dir + "/events.jsonl"), "worker.started")) {
        if (event.value("gen", -1) == gen && event.value("rank", -1) == 1) victim = event.value("pid", 0);
      }
      if (victim > 0 && started_at == 0) started_at = now_ms();
      return victim > 0;
    }, 30000));
    // Past the 1 s window by the harness's own clock (the supervisor's starts earlier still).
    wait_until([&] { return now_ms() - started_at >= 1500; }, 5000);
    REQUIRE(::kill(victim, SIGKILL) == 0);
  }
  REQUIRE(run.wait(60000));
  CHECK(run.exit_code == 0);
  auto events = read_events(dir + "/events.jsonl");
  CHECK(events_named(events, "failure.crash_loop").empty());
  CHECK(events_named(events, "failure.detected").size() == 3);
  CHECK(events_named(events, "plan.generation").size() == 4);
  auto finished = events_named(events, "run.finished");
  REQUIRE(finished.size() == 1);
  REQUIRE(finished[0]["incidents"].size() == 3);
  for (int gen = 0; gen < 3; ++gen) CHECK(finished[0]["incidents"][static_cast<size_t>(gen)]["gen"] == gen);
  CHECK(processes_of_run(run_id_of(dir)).empty());
}
