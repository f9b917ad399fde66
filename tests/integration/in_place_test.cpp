// In-place recovery (elastic.in_place) end to end, on the embedded localhost default with the
// reference trainer: a killed (or stopped) rank is the only process replaced; the survivors keep
// running, re-rendezvous under the next generation and hand the newest completed step to the
// replacement, so no step is lost and the run ends bit-identical to an uninterrupted one. A
// recovery that cannot finish falls back to today's full restart. Nothing of a run survives.

#include <doctest/doctest.h>

#include <signal.h>

#include <cerrno>
#include <cstring>
#include <set>

#include "tests/integration/dtrain_runner.h"
#include "tests/skip.h"

using namespace dtrain::testing;

namespace {

struct Layout {
  int slots = 4;
  int tensor = 1;
  std::string backend = "gloo";
};

std::string trainer_spec(const std::string& name, int steps, const Layout& layout, bool in_place,
                         const std::string& extra = "") {
  // The collectives keep dtrain-train's default 30 s timeout, three times the in-place deadline:
  // a survivor must leave a collective the dead rank stalls when gen.changed comes, not when
  // the collective times out (it did not always, before the interrupt: a fallback fails these
  // tests).
  return "version: 1\nname: " + name + "\nslots_per_host: " + std::to_string(layout.slots) +
         "\nworker:\n  command: [dtrain-train, --steps, \"" + std::to_string(steps) +
         "\", --log-every, \"50\", --layers, \"2\"]\n  backend: " + layout.backend + "\n"
         "parallelism: {tensor: " + std::to_string(layout.tensor) + "}\n"
         "batch: {global: 32, micro: 8}\n"
         "checkpoint: {interval_steps: 50, keep: 3}\n"
         "heartbeat: {interval: 200ms, timeout: 2s, hang_timeout: 3s}\n"
         "elastic: {max_restarts: 2" + std::string(in_place ? ", in_place: true" : "") + "}\n"
         "stop_grace: 2s\n" + extra;
}

/// Every rank's final line of a fault-free run (in_place off: the same arithmetic). Empty
/// when that run failed.
std::vector<std::string> uninterrupted_final_lines(int steps, const Layout& layout) {
  DtrainEnv env;
  DtrainProcess reference = env.run({"submit", env.write_spec("ref.yaml", trainer_spec("ref", steps, layout, false))});
  if (reference.exit_code != 0 || env.run_dirs().empty()) return {};
  std::vector<std::string> lines = ranks_final_lines(env.run_dirs().at(0), layout.slots);
  for (const std::string& line : lines) {
    if (line.empty()) return {};
  }
  return lines;
}

/// What every in-place recovery of one rank must show in the run log.
void check_in_place_recovery(const std::string& dir, int victim_rank, int world) {
  auto events = read_events(dir + "/events.jsonl");
  auto started = events_named(events, "recovery.started");
  REQUIRE(started.size() == 1);
  CHECK(started[0]["action"] == "in-place");
  auto completed = events_named(events, "recovery.completed");
  REQUIRE_MESSAGE(completed.size() == 1, "events:\n" << read_text(dir + "/events.jsonl"));
  CHECK(completed[0]["action"] == "in-place");
  CHECK(completed[0]["steps_lost"] == 0);
  CHECK_FALSE(completed[0].contains("fallback"));
  CHECK(completed[0]["phases"].contains("rendezvous_ms"));
  CHECK(completed[0]["phases"].contains("state_and_first_step_ms"));
  CHECK(events_named(events, "recovery.fallback").empty());
  // The health gate (on by default): the failed rank's host checked itself before its
  // replacement started, and the wait is a phase of the recovery.
  CHECK(completed[0]["phases"].contains("health_ms"));
  int after_failure = 0;
  for (const auto& health : events_named(events, "host.health")) after_failure += health["moment"] == "after failure";
  CHECK(after_failure == 1);
  // Only the victim was started again: world + 1 worker.started, the last one for its rank.
  auto workers = events_named(events, "worker.started");
  REQUIRE(workers.size() == static_cast<size_t>(world + 1));
  CHECK(workers.back()["rank"] == victim_rank);
  CHECK(workers.back()["gen"] == 1);
  std::set<std::string> carried_hosts;
  for (const auto& carried : events_named(events, "recovery.carried_over")) {
    carried_hosts.insert(carried["host"].get<std::string>());
    CHECK(carried["ranks"].size() == static_cast<size_t>(world - 1));
  }
  CHECK(carried_hosts.size() == 1);
  // Nothing of generation 0 was stopped: the only release is the end of the run's.
  for (const auto& released : events_named(events, "resources.released")) CHECK(released["gen"] == 1);
  CHECK(events_named(events, "plan.generation").size() == 2);
}

/// Runs `name` with `layout` in place, SIGKILLs rank `victim` once rank 0 is past step 50, and
/// checks what every such recovery must show: exit 0, the recovery's run log, final parameters
/// identical to an uninterrupted run's, no process left. Returns the run directory (in `env`).
std::string kill_rank_in_place(DtrainEnv& env, const std::string& name, const Layout& layout, int victim) {
  std::vector<std::string> expected = uninterrupted_final_lines(300, layout);
  REQUIRE(!expected.empty());
  DtrainProcess run = env.start({"submit", env.write_spec(name + ".yaml", trainer_spec(name, 300, layout, true))});
  std::string dir = only_run_dir(env);
  REQUIRE(!dir.empty());
  REQUIRE(wait_until([&] { return rank_logged_step(dir, 0) >= 50; }, 60000));
  int pid = started_pid(dir, victim);
  REQUIRE(pid > 0);
  // Once (a full suite, load 3) this kill found no such process 2 s into the test, when the kill
  // was timed by state.json: what the run had recorded by then says why, should it happen again.
  int killed = ::kill(pid, SIGKILL);
  int kill_errno = errno;
  REQUIRE_MESSAGE(killed == 0, "kill(" << pid << ") of rank " << victim << ": " << std::strerror(kill_errno) << "\nevents:\n"
                                       << read_text(dir + "/events.jsonl").substr(0, 6000) << "\nstate.json (start):\n"
                                       << read_text(dir + "/state.json").substr(0, 3000));
  REQUIRE(run.wait(120000));
  CHECK(run.exit_code == 0);
  check_in_place_recovery(dir, victim, layout.slots);
  CHECK(ranks_final_lines(dir, layout.slots) == expected);
  CHECK(processes_of_run(run_id_of(dir)).empty());
  return dir;
}

}  // namespace

TEST_CASE("in place: kill -9 of one of 4 data-parallel ranks replaces only it, 0 steps lost, same final parameters") {
  DtrainEnv env;
  std::string dir = kill_rank_in_place(env, "kill", Layout{4, 1}, 2);
  auto events = read_events(dir + "/events.jsonl");
  auto detected = events_named(events, "failure.detected");
  REQUIRE(detected.size() == 1);
  CHECK(detected[0]["rank"] == 2);
  CHECK(detected[0]["signal"] == "SIGKILL");
  // A survivor kept its process through the recovery (one worker.started for its rank) and
  // said so in its log.
  CHECK(read_text(dir + "/ranks/1.log").find("rejoined generation 1") != std::string::npos);
  int survivor_starts = 0;
  for (const auto& started : events_named(events, "worker.started")) survivor_starts += started["rank"] == 1;
  CHECK(survivor_starts == 1);
}

TEST_CASE("in place: tensor 2 x data 2, a killed rank's replacement takes its shard from the live replica, bit-identical") {
  DtrainEnv env;
  kill_rank_in_place(env, "tp", Layout{4, 2}, 3);
}

TEST_CASE("in place: a stopped rank is killed alone and replaced, its peers keep their processes") {
  DtrainEnv env;
  DtrainProcess run = env.start({"submit", env.write_spec("hang.yaml", trainer_spec("hang", 300, Layout{4, 1}, true))});
  std::string dir = only_run_dir(env);
  REQUIRE(wait_until([&] { return rank_logged_step(dir, 0) >= 50; }, 60000));
  int victim = started_pid(dir, 1);
  REQUIRE(victim > 0);
  REQUIRE(::kill(victim, SIGSTOP) == 0);
  REQUIRE(run.wait(120000));
  CHECK(run.exit_code == 0);

  check_in_place_recovery(dir, 1, 4);
  auto events = read_events(dir + "/events.jsonl");
  auto hangs = events_named(events, "worker.hang");
  REQUIRE(hangs.size() == 1);
  CHECK(hangs[0]["rank"] == 1);
  auto completed = events_named(events, "recovery.completed");
  REQUIRE(completed.size() == 1);
  CHECK(completed[0]["kind"] == "worker.hang");
  CHECK(completed[0]["phases"].contains("kill_ms"));
  CHECK(process_gone(victim));
  CHECK(processes_of_run(run_id_of(dir)).empty());
}

TEST_CASE("in place: with no live replica of the lost shard the recovery falls back to a full restart from the checkpoint") {
  // tensor 2 x data 1: rank 1's shard has no other replica, so the survivors cannot hand it over.
  // 1000 steps: 200 took about a second, and the victim could finish before the kill.
  Layout layout{2, 2};
  std::vector<std::string> expected = uninterrupted_final_lines(1000, layout);
  REQUIRE(!expected.empty());

  DtrainEnv env;
  DtrainProcess run = env.start({"submit", env.write_spec("solo.yaml", trainer_spec("solo", 1000, layout, true))});
  std::string dir = only_run_dir(env);
  REQUIRE(wait_until([&] { return rank_field(dir, 0, "step") >= 70; }, 60000));
  int victim = rank_pid(dir, 1);
  REQUIRE(victim > 0);
  REQUIRE(::kill(victim, SIGKILL) == 0);
  REQUIRE(run.wait(120000));
  CHECK(run.exit_code == 0);

  auto events = read_events(dir + "/events.jsonl");
  auto fallback = events_named(events, "recovery.fallback");
  REQUIRE(fallback.size() >= 1);
  auto completed = events_named(events, "recovery.completed");
  REQUIRE(completed.size() == 1);
  CHECK(completed[0]["action"] == "restart");
  CHECK(completed[0].contains("fallback"));
  CHECK(completed[0]["resume_step"].get<int>() >= 50);
  CHECK(ranks_final_lines(dir, 2) == expected);
  CHECK(processes_of_run(run_id_of(dir)).empty());
}

TEST_CASE("in place: a host that fails its after-failure health check gets no fresh rank, the run ends naming the check") {
  // The site's check passes at the start and fails from then on: the one host of the embedded
  // default cannot take the killed rank's replacement, and without another host there is no plan.
  DtrainEnv env;
  std::string calls = env.dir.path + "/site-check-calls";
  std::string check = env.dir.path + "/site-check.sh";
  write_text(check, "n=$(cat '" + calls + "' 2>/dev/null || echo 0)\necho $((n + 1)) > '" + calls +
                        "'\nif [ \"$n\" -ge 1 ]; then echo 'fan 3 stopped: drain this node'; exit 1; fi\n");
  std::string spec = trainer_spec("sick", 100000, Layout{2, 1}, true,
                                  "health: {command: \"/bin/sh '" + check + "'\", command_timeout: 10s}\n");
  DtrainProcess run = env.start({"submit", env.write_spec("sick.yaml", spec)});
  std::string dir = only_run_dir(env);
  REQUIRE(!dir.empty());
  REQUIRE(wait_until([&] { return rank_field(dir, 0, "step") >= 60; }, 60000));
  REQUIRE(read_text(calls) == "1\n");  // the site's check ran once, at the start, and passed
  int victim = rank_pid(dir, 1);
  REQUIRE(victim > 0);
  REQUIRE(::kill(victim, SIGKILL) == 0);
  REQUIRE(run.wait(120000));
  INFO("stderr: " << run.err());
  CHECK(read_text(calls) == "2\n");
  CHECK(run.exit_code == 5);  // hosts lost: no plan without the host

  auto events = read_events(dir + "/events.jsonl");
  auto fallback = events_named(events, "recovery.fallback");
  REQUIRE(fallback.size() == 1);
  CHECK(fallback[0]["detail"].get<std::string>().find("failed its health check (site command") != std::string::npos);
  bool left_out = false;
  for (const auto& health : events_named(events, "host.health")) {
    if (health["moment"] == "after failure" && health["action"] == "left out") {
      left_out = health.dump().find("fan 3 stopped") != std::string::npos;
    }
  }
  CHECK(left_out);
  CHECK(events_named(events, "host.quarantined").size() == 1);
  // Only the two ranks of generation 0 ever started: no replacement on the sick host.
  CHECK(events_named(events, "worker.started").size() == 2);
  CHECK(events_named(events, "recovery.completed").empty());
  CHECK((run.out() + run.err()).find("fan 3 stopped") != std::string::npos);  // on the console
  CHECK(processes_of_run(run_id_of(dir)).empty());
}

TEST_CASE("in place: dtrain drill kill-rank grades the recovery (carried over, 0 steps lost) and passes") {
  DtrainEnv env;
  std::string spec = env.write_spec("drill.yaml", trainer_spec("drill", 1000000, Layout{4, 1}, true));
  DtrainProcess submit = env.run({"submit", spec, "--detach"}, 60000);
  REQUIRE(submit.exit_code == 0);
  std::string id = submit.out().substr(0, submit.out().find('\n'));
  REQUIRE(!id.empty());
  std::string dir = env.home() + "/runs/" + id;
  DtrainProcess drill = env.run({"drill", id, "--fault", "kill-rank:2", "--detect", "10s", "--recover", "30s",
                                 "--max-lost-steps", "0", "--json"}, 120000);
  DtrainProcess stop = env.run({"stop", id}, 60000);
  CHECK(stop.exit_code == 0);
  nlohmann::json verdict = nlohmann::json::parse(drill.out(), nullptr, false);
  REQUIRE_MESSAGE(verdict.is_object(), "stdout: " << drill.out() << "\nstderr: " << drill.err());
  CHECK_MESSAGE(drill.exit_code == 0, drill.out() << drill.err());
  CHECK(verdict["verdict"] == "pass");
  REQUIRE(verdict["faults"].size() == 1);
  const nlohmann::json& fault = verdict["faults"][0];
  CHECK(fault["steps_lost"] == 0);
  CHECK(fault["phases"].contains("abort_ms"));
  bool carried_check = false;
  for (const nlohmann::json& check : fault["checks"]) {
    if (check["name"] == "survivors carried over in place") carried_check = check["met"] == true;
  }
  CHECK(carried_check);
  CHECK(process_gone(fault["pid"].get<int>()));
  CHECK(wait_until([&] { return processes_of_run(id).empty(); }, 10000));
}

TEST_CASE("in place on NCCL: kill -9 of one of 2 ranks, the survivor aborts its communicator and rejoins, bit-identical (skips without 2 GPUs)") {
  // NCCL allows one rank per GPU in a communicator: this needs 2 GPUs (scripts/gpu_check.sh
  // runs it where they are). The survivor's collective with the dead rank is aborted when
  // gen.changed comes (ncclCommAbort in its polling wait), not at its comm timeout.
  dtrain::testing::require_gpus(2, "in-place recovery on NCCL");
  DtrainEnv env;
  std::string dir = kill_rank_in_place(env, "nccl", Layout{2, 1, "nccl"}, 1);
  CHECK(read_text(dir + "/ranks/0.log").find("backend nccl") != std::string::npos);
}
