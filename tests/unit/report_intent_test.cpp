// The report's Intent section (issue 30): the run's spec.yaml intent stated, each recovery's
// time to train again, steps and time lost and action held to intent.recovery with the event
// that proves it, the training time against the target; one line for a run without an intent,
// and a spec.yaml that is damaged or a link is a note, never a failed report.

#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "launcher/base/clock.h"
#include "launcher/report/html_report.h"
#include "launcher/report/intent_grades.h"
#include "launcher/report/run_record.h"
#include "launcher/report/timeline.h"
#include "tests/unit/temp_dir.h"

using namespace dtrain;
using namespace dtrain::report;
using dtrain::testing::TempDir;
using nlohmann::json;

namespace {

constexpr int64_t kStart = 1'796'119'200'000;

std::string event(int64_t at, json body) {
  json line = {{"ts", format_timestamp_utc(kStart + at)}};
  line.update(body);
  return line.dump() + "\n";
}

const char* kSpecHead = "version: 1\nname: demo\nworker: {command: [python3, train.py]}\nelastic: {in_place: true}\n";

/// A run of 4 ranks on one host: a crash recovered by a restart that redid 20 steps (500 ms
/// from the failure to training again), then one recovered in place that lost nothing (99 ms).
std::string make_run(const TempDir& dir, const std::string& spec_yaml) {
  std::string run = dir.path + "/demo-20261201-100000-abcd";
  std::filesystem::create_directories(run);
  std::string log = "{\"dtrain_events\":1,\"run_id\":\"demo\",\"created\":\"" + format_timestamp_utc(kStart) + "\"}\n";
  log += event(0, {{"ev", "run.submitted"}, {"run_id", "demo"}, {"name", "demo"}, {"spec", "/x/demo.yaml"},
                   {"hosts", {"h1"}}, {"world_size", 4}, {"dtrain_version", "0.1.0"}, {"supervisor_pid", 1}});
  log += event(100, {{"ev", "plan.generation"}, {"gen", 0}, {"world_size", 4}, {"data", 4}, {"tensor", 1}, {"pipeline", 1},
                     {"grad_accum", 1}, {"resume_step", -1}, {"hosts", {"h1"}}});
  log += event(140, {{"ev", "comm.ready"}, {"gen", 0}, {"ranks", 4}, {"ms_since_spawn", 35}});
  log += event(1001, {{"ev", "failure.detected"}, {"gen", 0}, {"kind", "worker.exit"}, {"host", "h1"}, {"rank", 1},
                      {"detail", "killed"}, {"latency_ms", 1}});
  log += event(1500, {{"ev", "recovery.completed"}, {"gen", 1}, {"kind", "worker.exit"}, {"cause", {{"host", "h1"}, {"rank", 1}}},
                      {"phases", {{"first_step_ms", 10}}}, {"resume_step", 100}, {"last_step", 120}, {"steps_lost", 20},
                      {"world_size", 4}, {"action", "restart"}});
  log += event(4001, {{"ev", "failure.detected"}, {"gen", 1}, {"kind", "worker.exit"}, {"host", "h1"}, {"rank", 2},
                      {"detail", "killed"}});
  log += event(4100, {{"ev", "recovery.completed"}, {"gen", 2}, {"kind", "worker.exit"}, {"cause", {{"host", "h1"}, {"rank", 2}}},
                      {"phases", {{"first_step_ms", 10}}}, {"resume_step", 300}, {"last_step", 300}, {"steps_lost", 0},
                      {"world_size", 4}, {"action", "in-place"}});
  log += event(8000, {{"ev", "run.finished"}, {"state", "succeeded"}, {"exit_code", 0}, {"restarts", 2}, {"generations", 3},
                      {"duration_ms", 8000}});
  std::ofstream(run + "/events.jsonl") << log;
  std::string metrics;
  for (int i = 0; i < 4; ++i) {  // generation 0 steps in 10 ms, generation 1 in 30 ms
    json ranks = json::array();
    for (int rank = 0; rank < 4; ++rank) ranks.push_back({{"rank", rank}, {"step", i * 10}, {"step_ms", 10.0}});
    metrics += json({{"ts", format_timestamp_utc(kStart + 200 + i * 200)}, {"gen", 0}, {"ranks", ranks}}).dump() + "\n";
    for (json& rank : ranks) rank["step_ms"] = 30.0;
    metrics += json({{"ts", format_timestamp_utc(kStart + 2000 + i * 200)}, {"gen", 1}, {"ranks", ranks}}).dump() + "\n";
  }
  std::ofstream(run + "/metrics.jsonl") << metrics;
  std::ofstream(run + "/state.json") << json({{"version", 1}, {"state", "succeeded"}}).dump();
  if (!spec_yaml.empty()) std::ofstream(run + "/spec.yaml") << spec_yaml;
  return run;
}

std::string intent_yaml(const std::string& target) {
  return std::string(kSpecHead) + "intent:\n  model: {parameters: 7B}\n  data: {samples: 10M}\n  target_duration: " + target +
         "\n  recovery: {max_recovery: 1s, max_lost: 10 steps, mode: in-place}\n";
}

/// The section of the page, from its opening tag to its end.
std::string intent_html(const RunRecord& record) {
  std::string html = render_html(record, build_timeline(record));
  size_t start = html.find("<section id=\"intent\">");
  REQUIRE(start != std::string::npos);
  return html.substr(start, html.find("</section>", start) - start);
}

}  // namespace

TEST_CASE("report intent: every recovery held to max_recovery, max_lost and mode, with the event that proves it") {
  TempDir dir;
  Result<RunRecord> record = load_run_record(make_run(dir, intent_yaml("1h")));
  REQUIRE_MESSAGE(record.ok(), record.error().message);
  REQUIRE(record->intent.given);
  CHECK(record->intent_unread.empty());

  IntentGrades grades = grade_intent(*record);
  CHECK(grades.given);
  REQUIRE(grades.recoveries.size() == 2);
  const RecoveryAgainstIntent& restart = grades.recoveries[0];
  CHECK(restart.generation == 1);
  CHECK(restart.cause == "worker.exit: rank 1 on h1");
  CHECK(restart.time_to_train_ms == 500);  // 1500 - 1001 + 1 ms of detection latency
  CHECK(restart.steps_lost == 20);
  CHECK(restart.lost_ms == 200);           // 20 steps x generation 0's 10 ms
  REQUIRE(restart.checks.size() == 3);
  CHECK(restart.checks[0].objective == "max_recovery");
  CHECK(restart.checks[0].met);
  CHECK(restart.checks[1].objective == "max_lost");
  CHECK(restart.checks[1].limit == "10 steps");
  CHECK(restart.checks[1].measured == "20 steps");
  CHECK_FALSE(restart.checks[1].met);
  CHECK(restart.checks[2].objective == "mode");
  CHECK(restart.checks[2].measured == "restart");
  CHECK_FALSE(restart.checks[2].met);
  CHECK(restart.evidence.find("recovery.completed at " + format_timestamp_utc(kStart + 1500)) == 0);
  CHECK(restart.evidence.find("after failure.detected at " + format_timestamp_utc(kStart + 1001)) != std::string::npos);

  const RecoveryAgainstIntent& in_place = grades.recoveries[1];
  CHECK(in_place.time_to_train_ms == 99);
  CHECK(in_place.lost_ms == 0);
  for (const IntentCheck& check : in_place.checks) CHECK_MESSAGE(check.met, check.objective);

  REQUIRE(grades.target);
  CHECK(grades.target->met);  // a few seconds of training against 1h
  CHECK(grades.target->limit == "1h");
  CHECK(grades.target_evidence.find("events.jsonl") == 0);

  std::string html = intent_html(*record);
  CHECK(html.find("<li>model: 7B parameters, bf16, adamw</li>") != std::string::npos);
  CHECK(html.find("<li>data: 10M samples</li>") != std::string::npos);
  CHECK(html.find("recovery: mode in-place, training again within 1s, at most 10 steps lost") != std::string::npos);
  CHECK(html.find("2 recoveries, 1 of them missing an objective") != std::string::npos);
  CHECK(html.find("data-objective=\"mode\">restart vs in-place: missed") != std::string::npos);
  CHECK(html.find("data-objective=\"max_lost\">20 steps vs 10 steps: missed") != std::string::npos);
  CHECK(html.find("data-objective=\"mode\">in-place vs in-place: met") != std::string::npos);
}

TEST_CASE("report intent: a training time over the target is missed, and a run still going says so far") {
  TempDir dir;
  Result<RunRecord> record = load_run_record(make_run(dir, intent_yaml("2s")));
  REQUIRE(record.ok());
  IntentGrades grades = grade_intent(*record);
  REQUIRE(grades.target);
  CHECK_FALSE(grades.target->met);  // about 8 s of training against 2 s
  CHECK(intent_html(*record).find("data-objective=\"target_duration\"") != std::string::npos);

  // Without run.finished the time is the training so far.
  record->events.pop_back();
  IntentGrades running = grade_intent(*record);
  REQUIRE(running.target);
  CHECK(running.target->measured.find("so far (the run has not finished)") != std::string::npos);
}

TEST_CASE("report intent: a run without an intent says so in one line, a damaged or linked spec.yaml is a note") {
  TempDir dir;
  Result<RunRecord> plain = load_run_record(make_run(dir, kSpecHead));
  REQUIRE(plain.ok());
  CHECK_FALSE(plain->intent.given);
  CHECK(intent_html(*plain) ==
        "<section id=\"intent\"><h2>Intent</h2><p class=\"no-intent\">This run&#39;s spec states no intent (intent: in "
        "dtrain-spec(5)), so nothing is graded against one.</p>");

  TempDir broken_dir;
  Result<RunRecord> broken = load_run_record(make_run(broken_dir, std::string(kSpecHead) + "intent: {recovery: {mode: sideways}}\n"));
  REQUIRE(broken.ok());  // the report still renders
  CHECK_FALSE(broken->intent.given);
  CHECK(broken->intent_unread.find("spec.yaml does not load") != std::string::npos);
  CHECK(intent_html(*broken).find("No intent read: ") != std::string::npos);
  CHECK(std::find(broken->problems.begin(), broken->problems.end(), broken->intent_unread) != broken->problems.end());

  // No spec.yaml at all (a hand-made run directory): said in the section, not a file left out.
  TempDir bare_dir;
  Result<RunRecord> bare = load_run_record(make_run(bare_dir, ""));
  REQUIRE(bare.ok());
  CHECK(bare->intent_unread == "the run directory has no spec.yaml");
  CHECK(bare->unreadable_files == 0);
  CHECK(intent_html(*bare).find("No intent read: the run directory has no spec.yaml") != std::string::npos);

  // A link in a run directory is followed by no reader of it.
  TempDir linked_dir;
  std::string run = make_run(linked_dir, "");
  std::string elsewhere = linked_dir.write("elsewhere.yaml", intent_yaml("1h"));
  std::filesystem::create_symlink(elsewhere, run + "/spec.yaml");
  Result<RunRecord> linked = load_run_record(run);
  REQUIRE(linked.ok());
  CHECK_FALSE(linked->intent.given);
  CHECK(linked->intent_unread.find("spec.yaml") != std::string::npos);
  CHECK(linked->unreadable_files == 1);
}
