// Goodput from events alone: a run with a known launch, hang, restart, redone steps, checkpoint
// and end is cut into categories that sum to its wall time; older logs without
// generation.stepped fall back to the other first-step markers; a live run ends at "now".

#include <doctest/doctest.h>

#include "launcher/base/clock.h"
#include "launcher/metrics/goodput.h"
#include "tests/unit/typed_events.h"

using namespace dtrain;
using dtrain::testing::typed;
using nlohmann::json;

namespace {

constexpr int64_t kStart = 1'800'000'000'000;  // an arbitrary wall time, ms

json at(double seconds, json event) {
  event["ts"] = format_timestamp_utc(kStart + static_cast<int64_t>(seconds * 1000));
  return event;
}

double sum_of_parts(const metrics::Goodput& g) { return g.productive_seconds + g.lost_seconds(); }

std::vector<json> hang_and_restart_run() {
  return {
      at(0, {{"ev", "run.submitted"}}),
      at(1, {{"ev", "plan.generation"}, {"gen", 0}, {"resume_step", -1}}),
      at(10, {{"ev", "generation.stepped"}, {"gen", 0}, {"step", 1}, {"ms_since_spawn", 9000}}),
      at(30, {{"ev", "checkpoint.committed"}, {"gen", 0}, {"rank", 0}, {"step", 20}, {"seconds", 2.0}}),
      at(60, {{"ev", "worker.hang"}, {"gen", 0}, {"rank", 1}, {"silent_ms", 4000}}),
      at(60, {{"ev", "failure.detected"}, {"gen", 0}, {"kind", "worker.hang"}, {"latency_ms", 20}}),
      at(60, {{"ev", "recovery.started"}, {"gen", 0}, {"restarts", 1}}),
      at(65, {{"ev", "plan.generation"}, {"gen", 1}, {"resume_step", 20}}),
      at(70, {{"ev", "recovery.completed"}, {"gen", 1}, {"resume_step", 20}, {"last_step", 50}, {"steps_lost", 30}}),
      at(71, {{"ev", "generation.stepped"}, {"gen", 1}, {"step", 21}}),  // after recovery.completed: no effect
      at(200, {{"ev", "worker.exit"}, {"gen", 1}, {"rank", 0}, {"code", 0}}),
      at(205, {{"ev", "run.finished"}, {"gen", 1}}),
  };
}

}  // namespace

TEST_CASE("goodput: launch, detection, restart, redone steps, checkpoint stall and shutdown") {
  metrics::Goodput g = metrics::goodput_from_events(typed(hang_and_restart_run()));
  CHECK(g.finished);
  CHECK(g.restarts == 1);
  CHECK(g.wall_seconds == doctest::Approx(205));
  CHECK(g.launch_seconds == doctest::Approx(10));
  CHECK(g.detection_seconds == doctest::Approx(4));  // the hang's silence, not the 20 ms latency
  CHECK(g.restart_seconds == doctest::Approx(10));
  // Generation 0 trained steps 1..50 in 46 s: 30 redone steps cost 30 × 46/49 s.
  CHECK(g.redone_steps == 30);
  CHECK(g.redone_steps_seconds == doctest::Approx(30 * 46.0 / 49.0));
  CHECK(g.checkpoint_stall_seconds == doctest::Approx(2));
  CHECK(g.shutdown_seconds == doctest::Approx(5));
  CHECK(g.productive_seconds == doctest::Approx(46 + 130 - 30 * 46.0 / 49.0 - 2));
  CHECK(sum_of_parts(g) == doctest::Approx(g.wall_seconds));
  CHECK(g.ratio() == doctest::Approx(g.productive_seconds / 205));

  json j = g.to_json();
  CHECK(j["ratio"].get<double>() == doctest::Approx(g.ratio()));
  CHECK(j["lost_seconds"]["restart"].get<double>() == doctest::Approx(10));
  CHECK(j["redone_steps"] == 30);
}

TEST_CASE("goodput: a live run ends at now, before any step it is all launch") {
  std::vector<json> events = hang_and_restart_run();
  events.resize(3);  // submitted, plan, first step at 10 s
  metrics::Goodput live = metrics::goodput_from_events(typed(events), kStart + 40'000);
  CHECK(!live.finished);
  CHECK(live.wall_seconds == doctest::Approx(40));
  CHECK(live.launch_seconds == doctest::Approx(10));
  CHECK(live.productive_seconds == doctest::Approx(30));

  events.resize(2);
  metrics::Goodput launching = metrics::goodput_from_events(typed(events), kStart + 5'000);
  CHECK(launching.launch_seconds == doctest::Approx(5));
  CHECK(launching.ratio() == 0);
  CHECK(metrics::goodput_from_events({}).wall_seconds == 0);
}

TEST_CASE("goodput: an old log without generation.stepped starts training at run.state running") {
  std::vector<json> events = {
      at(0, {{"ev", "run.submitted"}}),
      at(2, {{"ev", "run.state"}, {"gen", 0}, {"state", "running"}}),
      at(12, {{"ev", "failure.detected"}, {"gen", 0}, {"kind", "worker.exit"}, {"latency_ms", 500}}),
      at(15, {{"ev", "recovery.completed"}, {"gen", 1}, {"resume_step", -1}, {"last_step", 9}, {"steps_lost", 9}}),
      at(25, {{"ev", "failure.budget_exhausted"}, {"gen", 1}}),
      at(26, {{"ev", "run.finished"}, {"gen", 1}}),
  };
  metrics::Goodput g = metrics::goodput_from_events(typed(events));
  CHECK(g.launch_seconds == doctest::Approx(2));
  CHECK(g.detection_seconds == doctest::Approx(0.5));
  CHECK(g.restart_seconds == doctest::Approx(3));
  CHECK(g.shutdown_seconds == doctest::Approx(1));
  CHECK(g.redone_steps == 9);  // 9.5 s for steps 0..9: 9 redone steps cost 9 × 9.5/9 s
  CHECK(g.redone_steps_seconds == doctest::Approx(9.5));
  CHECK(sum_of_parts(g) == doctest::Approx(26));
}
