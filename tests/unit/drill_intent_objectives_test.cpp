// A drill grades against the job's own intent where the drill gives no objective (issue 30):
// intent.recovery's max_recovery, max_lost (steps or time) and mode become objectives, each
// saying where it came from; the drill spec's own win; an in-place intent fails a restart; a
// run's spec.yaml that does not load gives a note, not an error.

#include <doctest/doctest.h>

#include "launcher/base/clock.h"
#include "launcher/drill/drill_report.h"
#include "launcher/drill/grading.h"
#include "launcher/drill/intent_objectives.h"
#include "tests/unit/temp_dir.h"
#include "tests/unit/drill_injection.h"
#include "tests/unit/typed_events.h"

using namespace dtrain;
using dtrain::testing::TempDir;
using dtrain::testing::at;
using dtrain::testing::kill_rank_1;
using dtrain::testing::typed;
using namespace dtrain::drill;
using nlohmann::json;
using RecoveryMode = spec::IntentSettings::RecoveryMode;

namespace {

/// A restart 1.8 s after the fault that redid 14 steps.
std::vector<LoggedEvent> restart_recovery() {
  return typed({
      at(30, {{"ev", "failure.detected"}, {"kind", "worker.exit"}, {"rank", 1}, {"gen", 0}}),
      at(35, {{"ev", "recovery.started"}, {"gen", 0}, {"action", "restart"}}),
      at(90, {{"ev", "resources.released"}, {"gen", 0}, {"host", "localhost"}, {"remaining", 0}}),
      at(100, {{"ev", "plan.generation"}, {"gen", 1}}),
      at(1800, {{"ev", "recovery.completed"}, {"gen", 1}, {"action", "restart"}, {"resume_step", 50}, {"last_step", 64},
                {"steps_lost", 14}}),
  });
}

/// An in-place recovery 140 ms after the fault that lost nothing.
std::vector<LoggedEvent> in_place_recovery() {
  return typed({
      at(20, {{"ev", "failure.detected"}, {"kind", "worker.exit"}, {"rank", 1}, {"gen", 0}}),
      at(25, {{"ev", "plan.generation"}, {"gen", 1}}),
      at(40, {{"ev", "recovery.carried_over"}, {"gen", 1}, {"host", "localhost"}, {"ranks", {0, 2, 3}}, {"pids", {4241, 4243}}}),
      at(140, {{"ev", "recovery.completed"}, {"gen", 1}, {"action", "in-place"}, {"resume_step", 64}, {"last_step", 64},
               {"steps_lost", 0}}),
  });
}

GradeContext running(std::optional<double> step_ms = std::nullopt) {
  GradeContext context;
  context.final_state = "running";
  context.step_ms = step_ms;
  return context;
}

spec::IntentSettings intent(Millis max_recovery, int64_t max_lost_steps, RecoveryMode mode) {
  spec::IntentSettings intent;
  intent.given = true;
  intent.max_recovery = max_recovery;
  intent.max_lost_steps = max_lost_steps;
  intent.mode = mode;
  return intent;
}

const ObjectiveResult* objective(const FaultVerdict& verdict, const std::string& name) {
  for (const ObjectiveResult& result : verdict.objectives) {
    if (result.name == name) return &result;
  }
  return nullptr;
}

}  // namespace

TEST_CASE("drill objectives: taken from the job's intent when the drill gives none, each saying so") {
  Objectives objectives = with_intent({}, intent(Millis(60'000), 100, RecoveryMode::restart));
  CHECK(objectives.recover == Millis(60'000));
  CHECK(objectives.recover_from == ObjectiveSource::intent);
  CHECK(objectives.max_lost_steps == 100);
  CHECK(objectives.lost_from == ObjectiveSource::intent);
  CHECK_FALSE(objectives.detect);     // the intent has no detection objective
  CHECK_FALSE(objectives.in_place);   // restart accepts any recovery
  CHECK(intent_note(objectives) == "recover 1m (max_recovery), max_lost_steps 100 (max_lost) from the job's intent "
                                   "(intent.recovery in its spec.yaml)");

  FaultVerdict verdict = grade_fault(kill_rank_1(), restart_recovery(), objectives, running());
  CHECK(verdict.passed());
  REQUIRE(objective(verdict, "recover"));
  CHECK(objective(verdict, "recover")->source == ObjectiveSource::intent);
  CHECK(objective(verdict, "recover")->measured == "1.8s");
  DrillReport report;
  report.faults.push_back(verdict);
  CHECK(format_report(report).find("recover          1m        1.8s      met     the job's intent") != std::string::npos);
  CHECK(to_json(verdict)["objectives"][0]["from"] == "the job's intent");

  // No intent at all: nothing is added, and nothing is said.
  CHECK(with_intent({}, spec::IntentSettings{}).recover == std::nullopt);
  CHECK(intent_note(with_intent({}, spec::IntentSettings{})).empty());
}

TEST_CASE("drill objectives: the drill spec's own win over the intent, the missing ones still come from it") {
  Objectives drill;
  drill.recover = Millis(1);  // the drill's, far tighter than the intent's 60s
  Objectives objectives = with_intent(drill, intent(Millis(60'000), 10, RecoveryMode::restart));
  CHECK(objectives.recover == Millis(1));
  CHECK(objectives.recover_from == ObjectiveSource::drill_spec);
  CHECK(objectives.max_lost_steps == 10);
  CHECK(objectives.lost_from == ObjectiveSource::intent);

  FaultVerdict verdict = grade_fault(kill_rank_1(), restart_recovery(), objectives, running());
  CHECK_FALSE(verdict.passed());
  std::vector<std::string> missed = verdict.missed();
  REQUIRE(missed.size() == 2);
  CHECK(missed[0] == "recover (limit 1ms from the drill spec, measured 1.8s)");
  CHECK(missed[1] == "max_lost_steps (limit 10 from the job's intent, measured 14)");
}

TEST_CASE("drill objectives: an in-place intent is met by an in-place recovery and missed by a restart") {
  Objectives objectives = with_intent({}, intent(Millis(5'000), 0, RecoveryMode::in_place));
  CHECK(objectives.in_place);
  CHECK(objectives.mode_from == ObjectiveSource::intent);

  FaultVerdict in_place = grade_fault(kill_rank_1(), in_place_recovery(), objectives, running());
  REQUIRE(objective(in_place, "mode"));
  CHECK(objective(in_place, "mode")->met);
  CHECK(objective(in_place, "mode")->measured == "in-place");
  CHECK(in_place.action == "in-place");

  FaultVerdict restart = grade_fault(kill_rank_1(), restart_recovery(), objectives, running());
  REQUIRE(objective(restart, "mode"));
  CHECK_FALSE(objective(restart, "mode")->met);
  CHECK(objective(restart, "mode")->measured == "restart");
  CHECK_FALSE(restart.passed());
  CHECK(restart.missed().front() == "mode (limit in-place from the job's intent, measured restart)");

  // A supervisor's loss can never be recovered in place: not held to the mode.
  Injection supervisor = kill_rank_1();
  supervisor.fault = *parse_fault("kill-supervisor");
  CHECK_FALSE(objective(grade_fault(supervisor, restart_recovery(), objectives, running()), "mode"));
}

TEST_CASE("drill objectives: max_lost as time is steps lost x the ranks' step time") {
  spec::IntentSettings lost_time = intent(Millis(0), 0, RecoveryMode::restart);
  lost_time.max_lost_time = Millis(10'000);
  Objectives objectives = with_intent({}, lost_time);
  CHECK_FALSE(objectives.recover);
  REQUIRE(objectives.max_lost_time);

  // 14 steps × 500 ms = 7 s: within 10 s.
  FaultVerdict within = grade_fault(kill_rank_1(), restart_recovery(), objectives, running(500));
  CHECK(within.lost_ms == 7000);
  REQUIRE(objective(within, "max_lost_time"));
  CHECK(objective(within, "max_lost_time")->met);
  CHECK(objective(within, "max_lost_time")->measured == "7s");
  // 14 × 1 s = 14 s: over.
  CHECK_FALSE(objective(grade_fault(kill_rank_1(), restart_recovery(), objectives, running(1000)), "max_lost_time")->met);
  // No step time: lost steps cannot be held to a time.
  FaultVerdict no_step_time = grade_fault(kill_rank_1(), restart_recovery(), objectives, running());
  const ObjectiveResult* unknown = objective(no_step_time, "max_lost_time");
  REQUIRE(unknown);
  CHECK_FALSE(unknown->met);
  CHECK(unknown->measured == "14 steps, step time unknown");
  // Nothing lost costs nothing, step time or not.
  CHECK(objective(grade_fault(kill_rank_1(), in_place_recovery(), objectives, running()), "max_lost_time")->met);
  // A drill's max_lost_steps stands for the loss: the intent's time is not added.
  Objectives drill;
  drill.max_lost_steps = 20;
  CHECK_FALSE(with_intent(drill, lost_time).max_lost_time);
}

TEST_CASE("drill objectives: the run's spec.yaml read for its intent, a broken one gives a note and no objective") {
  TempDir dir;
  std::string good = dir.write("good.yaml",
                               "version: 1\nname: t\nworker: {command: [\"true\"]}\nelastic: {in_place: true}\n"
                               "intent:\n  recovery: {max_recovery: 2m, max_lost: 50 steps, mode: in-place}\n");
  RunIntent read = read_run_intent(good);
  REQUIRE_MESSAGE(read.intent, read.note);
  CHECK(read.intent->max_recovery == Millis(120'000));
  CHECK(read.intent->mode == RecoveryMode::in_place);

  RunIntent none = read_run_intent(dir.write("none.yaml", "version: 1\nname: t\nworker: {command: [\"true\"]}\n"));
  CHECK_FALSE(none.intent);
  CHECK(none.note.empty());

  RunIntent broken = read_run_intent(dir.write("broken.yaml", "version: 1\nintent: {recovery: {max_recovery: soon}}\n"));
  CHECK_FALSE(broken.intent);
  CHECK(broken.note.find("the run's spec.yaml gives no intent to grade against") == 0);
  RunIntent missing = read_run_intent(dir.path + "/absent.yaml");
  CHECK_FALSE(missing.intent);
  CHECK_FALSE(missing.note.empty());
}
