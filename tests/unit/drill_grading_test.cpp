// Grading a drill from scripted event lists: a clean recovery passes, an objective set too
// tight fails naming the objective and the measured value, and every missing piece of a
// recovery (no detection, no recovery, an unreleased host, a survivor, a wrong blame) fails.

#include <doctest/doctest.h>

#include "launcher/base/clock.h"
#include "launcher/drill/drill_report.h"
#include "launcher/drill/grading.h"
#include "tests/unit/drill_injection.h"
#include "tests/unit/typed_events.h"

using namespace dtrain;
using dtrain::testing::at;
using dtrain::testing::kill_rank_1;
using dtrain::testing::typed;
using namespace dtrain::drill;
using nlohmann::json;

namespace {

std::vector<json> clean_recovery() {
  return {
      at(30, {{"ev", "failure.detected"}, {"kind", "worker.exit"}, {"rank", 1}, {"gen", 0}}),
      at(35, {{"ev", "recovery.started"}, {"gen", 0}}),
      at(90, {{"ev", "resources.released"}, {"gen", 0}, {"host", "localhost"}, {"remaining", 0}}),
      at(100, {{"ev", "plan.generation"}, {"gen", 1}}),
      at(1800, {{"ev", "recovery.completed"}, {"gen", 1}, {"resume_step", 50}, {"last_step", 64}, {"steps_lost", 14},
                {"phases", {{"stop_ms", 60}, {"replan_ms", 10}, {"spawn_ms", 200}, {"first_step_ms", 1500}}}}),
  };
}

GradeContext running() {
  GradeContext context;
  context.final_state = "running";
  return context;
}

bool has_check(const FaultVerdict& verdict, const std::string& name, bool met) {
  for (const CheckResult& check : verdict.checks) {
    if (check.name == name) return check.met == met;
  }
  return false;
}

}  // namespace

TEST_CASE("a clean recovery within the objectives passes with the measured values") {
  Objectives objectives{Millis(10'000), Millis(60'000), 100};
  FaultVerdict verdict = grade_fault(kill_rank_1(), typed(clean_recovery()), objectives, running());
  CHECK(verdict.passed());
  CHECK(verdict.detect_ms == 30);
  CHECK(verdict.recover_ms == 1800);
  CHECK(verdict.steps_lost == 14);
  CHECK(verdict.resume_step == 50);
  CHECK(verdict.detected_kind == "worker.exit");
  CHECK(verdict.resources_released == true);
  REQUIRE(verdict.objectives.size() == 3);
  CHECK(verdict.objectives[0].measured == "30ms");
  CHECK(verdict.objectives[1].measured == "1.8s");
  json out = to_json(verdict);
  CHECK(out["verdict"] == "pass");
  CHECK(out["phases"]["first_step_ms"] == 1500);
}

TEST_CASE("an objective set too tight fails, naming the objective, its limit and the measured value") {
  Objectives objectives;
  objectives.recover = Millis(1);
  FaultVerdict verdict = grade_fault(kill_rank_1(), typed(clean_recovery()), objectives, running());
  CHECK_FALSE(verdict.passed());
  std::vector<std::string> missed = verdict.missed();
  REQUIRE(missed.size() == 1);
  CHECK(missed[0] == "recover (limit 1ms from the drill spec, measured 1.8s)");

  DrillReport report;
  report.drill_id = "drill-x";
  report.mode = "live";
  report.faults.push_back(verdict);
  CHECK(report.exit_code() == ExitCode::job_failed);
  CHECK(format_report(report).find("recover          1ms       1.8s      MISSED  the drill spec") != std::string::npos);
  CHECK(to_json(report)["missed"][0] == "kill-rank:1: recover (limit 1ms from the drill spec, measured 1.8s)");
}

TEST_CASE("no failure detected and no recovery: every objective is missed as 'never'") {
  Objectives objectives{Millis(10'000), Millis(60'000), 100};
  FaultVerdict verdict = grade_fault(kill_rank_1(), {}, objectives, running());
  CHECK_FALSE(verdict.passed());
  for (const ObjectiveResult& objective : verdict.objectives) {
    CHECK_FALSE(objective.met);
    CHECK(objective.measured == "never");
  }
  CHECK(has_check(verdict, "failure detected", false));
  CHECK(has_check(verdict, "recovery completed", false));
}

TEST_CASE("a host that did not release the old generation before the next was planned fails") {
  std::vector<json> events = clean_recovery();
  events[2]["remaining"] = 1;  // a worker of generation 0 survived the stop
  FaultVerdict verdict = grade_fault(kill_rank_1(), typed(events), {}, running());
  CHECK(verdict.resources_released == false);
  CHECK(has_check(verdict, "old generation released", false));

  std::vector<json> late = clean_recovery();
  std::swap(late[2], late[3]);  // released only after the next generation was planned
  CHECK(grade_fault(kill_rank_1(), typed(late), {}, running()).resources_released == false);
}

TEST_CASE("surviving processes, a wrong blame or a failed run fail the verdict") {
  GradeContext survivors = running();
  survivors.surviving_pids = {4242};
  CHECK(has_check(grade_fault(kill_rank_1(), typed(clean_recovery()), {}, survivors), "old processes gone", false));

  std::vector<json> blamed_other = clean_recovery();
  blamed_other[0]["rank"] = 0;
  CHECK(has_check(grade_fault(kill_rank_1(), typed(blamed_other), {}, running()), "blamed the faulted rank", false));

  GradeContext failed;
  failed.final_state = "failed";
  CHECK_FALSE(grade_fault(kill_rank_1(), typed(clean_recovery()), {}, failed).passed());
  GradeContext spec_mode;
  spec_mode.final_state = "running";
  spec_mode.require_success = true;
  CHECK_FALSE(grade_fault(kill_rank_1(), typed(clean_recovery()), {}, spec_mode).passed());
}

TEST_CASE("corrupt-checkpoint passes only when the damaged step is rejected and an older one resumed") {
  Injection injection = kill_rank_1();
  injection.fault = *parse_fault("corrupt-checkpoint:1");
  injection.corrupted_step = 60;
  injection.corrupted_file = "/ckpt/step-60/shard-tp0-pp0.bin";
  std::vector<json> events = clean_recovery();
  events.insert(events.begin() + 4, at(500, {{"ev", "checkpoint.rejected"}, {"step", 60}, {"reason", "crc"}}));
  events.back()["resume_step"] = 40;
  CHECK(grade_fault(injection, typed(events), {}, running()).passed());

  std::vector<json> resumed_damaged = events;
  resumed_damaged.back()["resume_step"] = 60;
  CHECK(has_check(grade_fault(injection, typed(resumed_damaged), {}, running()), "resumed from the previous good checkpoint", false));
  CHECK(has_check(grade_fault(injection, typed(clean_recovery()), {}, running()), "corrupt checkpoint rejected", false));

  // The supervisor named a newer step, damaged too (it had heard of it after the drill read the
  // log): its rejection counts, and the resume must still go below the oldest damaged step.
  std::vector<json> newer_rejected = clean_recovery();
  newer_rejected.insert(newer_rejected.begin() + 4, at(500, {{"ev", "checkpoint.rejected"}, {"step", 80}, {"reason", "crc"}}));
  newer_rejected.back()["resume_step"] = 40;
  CHECK(grade_fault(injection, typed(newer_rejected), {}, running()).passed());
  // A rejection of an older, undamaged step is not the damage being found.
  std::vector<json> older_rejected = newer_rejected;
  older_rejected[4]["step"] = 40;
  CHECK(has_check(grade_fault(injection, typed(older_rejected), {}, running()), "corrupt checkpoint rejected", false));
}

TEST_CASE("slow-storage passes when slow checkpoints commit and the run succeeds without a failure") {
  Injection injection;
  injection.fault = *parse_fault("slow-storage");
  injection.fault.delay = Millis(500);
  injection.wall_ms = dtrain::testing::kInjectedAt;
  std::vector<json> events = {
      at(900, {{"ev", "checkpoint.committed"}, {"step", 20}, {"seconds", 0.52}}),
      at(1900, {{"ev", "checkpoint.committed"}, {"step", 40}, {"seconds", 0.51}}),
  };
  GradeContext done;
  done.final_state = "succeeded";
  done.require_success = true;
  Objectives objectives;
  objectives.max_lost_steps = 0;
  FaultVerdict verdict = grade_fault(injection, typed(events), objectives, done);
  CHECK(verdict.passed());
  CHECK(verdict.last_step == 40);

  std::vector<json> fast = {at(900, {{"ev", "checkpoint.committed"}, {"step", 20}, {"seconds", 0.01}})};
  CHECK(has_check(grade_fault(injection, typed(fast), {}, done), "delay took effect", false));
  events.push_back(at(5000, {{"ev", "failure.detected"}, {"kind", "worker.hang"}, {"rank", 0}}));
  CHECK(has_check(grade_fault(injection, typed(events), {}, done), "no failure detected", false));
}

TEST_CASE("a drill that could not run reports error and exit 3") {
  DrillReport report;
  report.error = "run x has ended (succeeded) before kill-rank:1 could be injected";
  CHECK(report.verdict() == "error");
  CHECK(report.exit_code() == ExitCode::infra);
  CHECK(to_json(report)["error"] == *report.error);
}

TEST_CASE("--spec mode: passing faults still fail the drill when the job did not succeed or left processes") {
  DrillReport report;
  report.drill_id = "drill-y";
  report.mode = "spec";
  report.final_state = "succeeded";
  report.cleanup_checked = true;
  report.faults.push_back(grade_fault(kill_rank_1(), typed(clean_recovery()), {}, running()));
  CHECK(report.passed());
  report.final_state = "failed";
  CHECK(report.exit_code() == ExitCode::job_failed);
  CHECK(to_json(report)["missed"][0] == "the job did not succeed (final state failed)");
  report.final_state = "succeeded";
  report.leftover_pids = {777};
  CHECK_FALSE(report.passed());
  CHECK(format_report(report).find("1 process(es) of the run remained (killed), e.g. pid 777") != std::string::npos);
}

TEST_CASE("an in-place recovery passes with its survivors alive, and fails when the faulted process was carried over") {
  std::vector<json> events = {
      at(20, {{"ev", "failure.detected"}, {"kind", "worker.exit"}, {"rank", 1}, {"gen", 0}}),
      at(22, {{"ev", "recovery.started"}, {"gen", 0}, {"action", "in-place"}}),
      at(25, {{"ev", "plan.generation"}, {"gen", 1}}),
      at(40, {{"ev", "recovery.carried_over"}, {"gen", 1}, {"host", "localhost"}, {"ranks", {0, 2, 3}},
              {"pids", {4241, 4243, 4244}}}),
      at(140, {{"ev", "recovery.completed"}, {"gen", 1}, {"action", "in-place"}, {"resume_step", 64},
               {"last_step", 64}, {"steps_lost", 0},
               {"phases", {{"abort_ms", 18}, {"spawn_ms", 30}, {"rendezvous_ms", 50}, {"state_and_first_step_ms", 20}}}}),
  };
  GradeContext context = running();
  context.surviving_pids = {4241, 4243, 4244};  // the carried-over survivors, alive by design
  Objectives objectives{Millis(10'000), Millis(1'000), 0};
  FaultVerdict verdict = grade_fault(kill_rank_1(), typed(events), objectives, context);
  CHECK(verdict.passed());
  CHECK(verdict.steps_lost == 0);
  CHECK(has_check(verdict, "survivors carried over in place", true));
  CHECK(has_check(verdict, "old processes gone", true));
  DrillReport report;
  report.faults.push_back(verdict);
  CHECK(format_report(report).find("abort 18ms") != std::string::npos);

  context.surviving_pids = {4241, 4243, 4244, 4299};  // one more of generation 0: a leftover
  CHECK(has_check(grade_fault(kill_rank_1(), typed(events), objectives, context), "old processes gone", false));

  events[3]["pids"] = {4241, 4242, 4244};  // the faulted pid 4242 among the carried
  context.surviving_pids = {4241, 4242, 4244};
  CHECK(has_check(grade_fault(kill_rank_1(), typed(events), objectives, context), "survivors carried over in place", false));
}

TEST_CASE("a host that failed its health check is graded: used again fails the drill, kept out passes") {
  auto left_out = at(60, {{"ev", "host.health"}, {"host", "h2"}, {"moment", "after failure"}, {"verdict", "fail"},
                          {"action", "left out"}, {"ms", 12}, {"detail", "h2 failed its health check"},
                          {"checks", json::array({{{"name", "infiniband mlx5_0/1"}, {"verdict", "fail"},
                                                   {"message", "port state 1: DOWN"}}})}});
  std::vector<json> kept_out = clean_recovery();
  kept_out.insert(kept_out.begin() + 2, left_out);
  kept_out.push_back(at(1900, {{"ev", "worker.started"}, {"rank", 1}, {"host", "h3"}, {"local_rank", 0}, {"pid", 77}}));
  FaultVerdict good = grade_fault(kill_rank_1(), typed(kept_out), {}, running());
  CHECK(has_check(good, "unhealthy host not taken back", true));
  CHECK(good.passed());

  std::vector<json> taken_back = kept_out;
  taken_back.push_back(at(2000, {{"ev", "worker.started"}, {"rank", 1}, {"host", "h2"}, {"local_rank", 0}, {"pid", 78}}));
  FaultVerdict bad = grade_fault(kill_rank_1(), typed(taken_back), {}, running());
  CHECK(has_check(bad, "unhealthy host not taken back", false));
  CHECK_FALSE(bad.passed());

  // No check failed: nothing to grade, and no such line.
  FaultVerdict none = grade_fault(kill_rank_1(), typed(clean_recovery()), {}, running());
  for (const CheckResult& check : none.checks) CHECK(check.name != "unhealthy host not taken back");
}
