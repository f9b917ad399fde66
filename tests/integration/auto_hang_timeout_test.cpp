// An auto heartbeat.hang_timeout (the default) in a real run: a python worker of the worker
// protocol steps every 50 ms under a spec that sets no timeout; once the run's steps are seen,
// the hang timeout in force is set from them, a SIGSTOPped rank is found hung with it (within
// 2 s: the run log records the limit it passed), and status and the report show the value.

#include <doctest/doctest.h>

#include <signal.h>
#include <unistd.h>

#include "tests/integration/dtrain_runner.h"
#include "tests/skip.h"

using namespace dtrain::testing;

namespace {

constexpr const char* kFastSteps = R"PY(
import os, sys, time
sys.path.insert(0, os.environ["DTRAIN_SOURCE_DIR"] + "/worker/python")
from dtrain_worker import Worker
w = Worker.from_env()
if w.generation > 0:  # the restart after the hang: done
    w.beat(1, final=True)
    w.close()
    sys.exit(0)
step = 0
while True:  # a step every 50 ms, until stopped
    time.sleep(0.05)
    step += 1
    w.beat(step, step_ms=50.0)
)PY";

/// The newest hang_timeout.changed event, or an empty object.
nlohmann::json latest_change(const std::string& dir) {
  auto changes = events_named(read_events(dir + "/events.jsonl"), "hang_timeout.changed");
  return changes.empty() ? nlohmann::json::object() : changes.back();
}

}  // namespace

TEST_CASE("auto hang_timeout: a SIGSTOPped rank of a job stepping every 50 ms is found within 2 s, with no timeout in the spec") {
  if (::access("/usr/bin/python3", X_OK) != 0) skip_test("the worker needs /usr/bin/python3");
  DtrainEnv env;
  std::string script = env.dir.path + "/fast_steps.py";
  write_text(script, kFastSteps);
  // Beats every 50 ms so the supervisor can see 50 ms steps; no timeout of any kind.
  std::string spec = env.write_spec(
      "fast.yaml", "version: 1\nname: fast\nslots_per_host: 2\nworker:\n  command: [/usr/bin/python3, " + script +
                       "]\n  env: {DTRAIN_SOURCE_DIR: " + std::string(DTRAIN_SOURCE_DIR) +
                       "}\nheartbeat: {interval: 50ms}\nelastic: {max_restarts: 1}\nstop_grace: 1s\n");
  DtrainProcess run = env.start({"submit", spec});
  std::string dir = only_run_dir(env);
  REQUIRE(!dir.empty());

  // The warm-up value first (1 minute: a slow first step is not a hang), then one set from the
  // steps seen.
  REQUIRE(wait_until([&] { return latest_change(dir).value("basis", "") != ""; }, 30'000));
  nlohmann::json first = events_named(read_events(dir + "/events.jsonl"), "hang_timeout.changed").at(0);
  CHECK(first["basis"] == "warm-up");
  CHECK(first["hang_timeout_ms"] == 60'000);
  CHECK(first["progress_window_ms"] == 120'000);
  REQUIRE(wait_until([&] { return latest_change(dir).value("basis", "warm-up") != "warm-up"; }, 30'000));
  nlohmann::json in_force = latest_change(dir);
  INFO("in force: " << in_force.dump());
  CHECK(in_force["factor"] == 5);
  CHECK(in_force["longest_step_ms"].get<int64_t>() >= 40);
  // A stopped rank is found once quiet for the limit (checked every 100 ms tick): within 2 s
  // while the limit is at most 1.5 s. The floor is 1 s (5 beats of 50 ms is less); 5 x the
  // longest interval between two beats with a step sets more on a loaded machine.
  int64_t limit = in_force["hang_timeout_ms"].get<int64_t>();
  CHECK(limit >= 1'000);
  CHECK(limit <= 1'500);
  CHECK(in_force["progress_window_ms"].get<int64_t>() == 2 * limit);

  // status shows the value in force while the run goes on.
  REQUIRE(wait_until([&] { return rank_field(dir, 1, "pid") > 0; }, 10'000));
  DtrainProcess status = env.run({"status", run_id_of(dir)}, 30'000);
  INFO("status:\n" << status.out());
  CHECK(status.out().find("hang timeout ") != std::string::npos);
  CHECK(status.out().find(" auto (") != std::string::npos);

  int victim = rank_pid(dir, 1);
  REQUIRE(victim > 0);
  int64_t stopped_at = now_ms();
  REQUIRE(::kill(victim, SIGSTOP) == 0);
  int64_t seen_at = 0;
  wait_until([&] {
    if (events_named(read_events(dir + "/events.jsonl"), "worker.hang").empty()) return false;
    seen_at = now_ms();
    return true;
  }, 60'000);
  REQUIRE(run.wait(120'000));
  CHECK(run.exit_code == 0);

  auto events = read_events(dir + "/events.jsonl");
  auto hangs = events_named(events, "worker.hang");
  REQUIRE(hangs.size() == 1);
  CHECK(hangs[0]["rank"] == 1);
  CHECK(hangs[0]["phase"] == "train");
  // The limit it passed is the one in force, at most 1.5 s: found within 2 s of the stop.
  int64_t hang_limit = hangs[0]["limit_ms"].get<int64_t>();
  CHECK(hang_limit <= 1'500);
  CHECK(hang_limit + 2 * 50 + 100 < 2'000);  // + the blame slack (2 beats) + a tick
  MESSAGE("auto hang_timeout in force " << hang_limit << " ms; worker.hang silent_ms "
                                        << hangs[0]["silent_ms"].get<int64_t>() << "; seen in events.jsonl "
                                        << (seen_at - stopped_at) << " ms after SIGSTOP (wall clock, not asserted)");
  auto samples = events_named(events, "worker.sample");
  CHECK(samples.size() == 1);
  CHECK(events_named(events, "recovery.completed").size() == 1);

  // The restart warmed up again: 1 minute until its steps are seen.
  bool gen1_warm = false;
  for (const nlohmann::json& change : events_named(events, "hang_timeout.changed")) {
    if (change["gen"] == 1 && change["basis"] == "warm-up" && change["hang_timeout_ms"] == 60'000) gen1_warm = true;
  }
  CHECK(gen1_warm);

  // state.json, status and the report carry the value in force.
  nlohmann::json state = nlohmann::json::parse(read_text(dir + "/state.json"));
  REQUIRE(state["hang_timeout"].is_object());
  CHECK(state["hang_timeout"]["basis"] == "warm-up");
  DtrainProcess after = env.run({"status", run_id_of(dir)}, 30'000);
  CHECK(after.out().find("hang timeout 1m auto (warm-up") != std::string::npos);
  DtrainProcess report = env.run({"report", run_id_of(dir)}, 60'000);
  REQUIRE_MESSAGE(report.exit_code == 0, report.err());
  std::string html = read_text(dir + "/report.html");
  CHECK(html.find("<th>hang timeout</th><td>1m auto (warm-up") != std::string::npos);
  CHECK(html.find("(hang_timeout.changed)") != std::string::npos);
  check_nothing_left(run_id_of(dir));
  CHECK(process_gone(victim));
}
