// dtrain plan --advise's expected time to the target (issue 30): the job's step time from its
// earlier runs in a synthetic registry (the median of the runs' own step times, those at the same
// world size first), the steps the intent's data takes, and expected = steps x step time against
// intent.target_duration, every figure with its source; no earlier run says so and how to get one.

#include <doctest/doctest.h>

#include <map>

#include "launcher/plan/target_time.h"
#include "launcher/registry/registry_db.h"
#include "launcher/registry/registry_step_times.h"
#include "tests/unit/temp_dir.h"

using namespace dtrain;
using namespace dtrain::registry;
using dtrain::testing::TempDir;

namespace {

constexpr int64_t kDay = 24 * 3600 * 1000LL;
constexpr int64_t kMonday = 1'796'119'200'000;

void add_run(RegistryDb& db, const std::string& id, const std::string& name, int64_t submitted_ms, int hosts,
             int gpus_per_host, bool started = true) {
  RunRow row;
  row.id = id;
  row.name = name;
  row.run_dir = "/runs/" + id;
  row.submitted_ms = submitted_ms;
  if (started) row.started_ms = submitted_ms + 60'000;
  row.ended_ms = submitted_ms + 3'600'000;
  row.state = "succeeded";
  REQUIRE(db.insert_run(row).ok());
  for (int host = 0; host < hosts && started; ++host) {
    AllocationRow held{id, 0, "gpu0" + std::to_string(host), gpus_per_host, "gpu", submitted_ms + 60'000,
                       submitted_ms + 3'600'000, "finished"};
    REQUIRE(db.insert_allocation(held).ok());
    held.generation = 1;  // a later generation after a shrink: not the run's world size
    held.units = 1;
    REQUIRE(db.insert_allocation(held).ok());
  }
}

/// The run directories' step times, as metrics.jsonl would give them.
StepTimeOfRun fake_metrics(std::map<std::string, double> step_ms_by_dir) {
  return [step_ms_by_dir](const std::string& run_dir) -> std::optional<double> {
    auto found = step_ms_by_dir.find(run_dir);
    if (found == step_ms_by_dir.end()) return std::nullopt;
    return found->second;
  };
}

spec::JobSpec job(double samples, int global_batch, Millis target) {
  spec::JobSpec spec;
  spec.name = "llm";
  spec.batch.global = global_batch;
  spec.intent.given = true;
  spec.intent.samples = samples;
  spec.intent.target_duration = target;
  return spec;
}

}  // namespace

TEST_CASE("expected time: two earlier runs at 500 and 700 ms a step, 18000 steps -> exactly 3 h, missing a 2 h target by 1 h") {
  TempDir dir;
  Result<RegistryDb> db = RegistryDb::open(dir.path + "/registry.db", true);
  REQUIRE(db.ok());
  add_run(*db, "llm-a", "llm", kMonday, 2, 8);
  add_run(*db, "llm-b", "llm", kMonday + kDay, 2, 8);
  add_run(*db, "llm-small", "llm", kMonday + 2 * kDay, 1, 8);        // world size 8: left out while 16 has runs
  add_run(*db, "llm-nometrics", "llm", kMonday + 3 * kDay, 2, 8);    // no step time: skipped
  add_run(*db, "llm-neverran", "llm", kMonday + 4 * kDay, 2, 8, false);  // never trained
  add_run(*db, "other", "other-job", kMonday, 2, 8);
  StepTimeOfRun metrics = fake_metrics({{"/runs/llm-a", 500}, {"/runs/llm-b", 700}, {"/runs/llm-small", 2000},
                                        {"/runs/other", 50}, {"/runs/llm-neverran", 1}});

  Result<std::vector<EarlierRun>> earlier = earlier_runs(*db, "llm", 10);
  REQUIRE(earlier.ok());
  REQUIRE(earlier->size() == 4);
  CHECK(earlier->front().run_id == "llm-nometrics");  // newest first
  CHECK(earlier->back().world_size == 16);            // generation 0's units, not the shrink's

  Result<JobStepTime> measured = job_step_time(*db, "llm", 16, metrics);
  REQUIRE(measured.ok());
  REQUIRE(measured->median_step_ms);
  CHECK(*measured->median_step_ms == doctest::Approx(600));
  CHECK(measured->same_world_size);
  REQUIRE(measured->runs.size() == 2);
  CHECK(measured->source ==
        "median of 2 earlier run(s) of 'llm' at world size 16 in the registry (llm-b 700ms, llm-a 500ms; each the median "
        "step_ms of its metrics.jsonl)");

  // 9,216,000 samples / 512 a step = 18,000 steps x 0.6 s = 10,800 s = 3 h against a 2 h target.
  spec::JobSpec spec = job(9'216'000, 512, Millis(2 * 3600 * 1000));
  plan::TargetTime target =
      plan::expected_time_to_target(spec, plan::MeasuredStepTime{*measured->median_step_ms / 1000, measured->source}, "");
  REQUIRE(target.steps);
  CHECK(*target.steps == 18000);
  REQUIRE(target.expected_seconds);
  CHECK(*target.expected_seconds / 3600 == doctest::Approx(3.0));
  CHECK(target.meets() == false);
  CHECK(plan::verdict_text(target) == "misses the target 2h by 1h00m (expected 3h00m)");
  CHECK(target.steps_source == "9216000 samples (intent.data.samples) / 512 a step (batch.global) = 18000 steps");
  nlohmann::json json = plan::to_json(target);
  CHECK(json["expected_seconds"].get<double>() == doctest::Approx(10800));
  CHECK(json["step_source"] == measured->source);
  CHECK(json["target_source"] == "intent.target_duration");
  CHECK(json["meets_target"] == false);

  // A 4 h target is met, with the time to spare.
  spec.intent.target_duration = Millis(4 * 3600 * 1000);
  plan::TargetTime met = plan::expected_time_to_target(spec, plan::MeasuredStepTime{0.6, "x"}, "");
  CHECK(plan::verdict_text(met) == "meets the target 4h (expected 3h00m, 1h00m to spare)");

  // No run at world size 32: every world size, said so.
  Result<JobStepTime> other_size = job_step_time(*db, "llm", 32, metrics);
  REQUIRE(other_size.ok());
  CHECK_FALSE(other_size->same_world_size);
  CHECK(*other_size->median_step_ms == doctest::Approx(700));  // 500, 700, 2000
  CHECK(other_size->source.find("at other world sizes (none at 32)") != std::string::npos);
}

TEST_CASE("expected time: tokens need the sequence length, and the steps need batch.global") {
  spec::JobSpec spec = job(0, 512, Millis(3600 * 1000));
  spec.intent.tokens = 4e9;
  plan::TargetTime no_length = plan::expected_time_to_target(spec, plan::MeasuredStepTime{1, "--step-time"}, "");
  CHECK_FALSE(no_length.steps);
  REQUIRE_FALSE(no_length.missing.empty());
  CHECK(no_length.missing.front().find("intent.data.tokens needs intent.data.sequence_length") == 0);
  CHECK(plan::verdict_text(no_length).find("unknown: intent.data.tokens needs") == 0);

  spec.intent.sequence_length = 4096;  // 4e9 / (512 x 4096) = 1907.3 -> 1908 steps
  plan::TargetTime tokens = plan::expected_time_to_target(spec, plan::MeasuredStepTime{1, "--step-time"}, "");
  REQUIRE(tokens.steps);
  CHECK(*tokens.steps == 1908);
  CHECK(*tokens.expected_seconds == doctest::Approx(1908));
  CHECK(tokens.meets() == true);

  spec.batch.global = 0;
  CHECK(plan::expected_time_to_target(spec, plan::MeasuredStepTime{1, "x"}, "").missing.front().find("batch.global is not set") == 0);
}

TEST_CASE("expected time: no earlier run of the job says so and how to get one") {
  TempDir dir;
  Result<RegistryDb> db = RegistryDb::open(dir.path + "/registry.db", true);
  REQUIRE(db.ok());
  Result<JobStepTime> none = job_step_time(*db, "llm", 16, fake_metrics({}));
  REQUIRE(none.ok());
  CHECK_FALSE(none->median_step_ms);
  CHECK(none->source ==
        "the registry has no earlier run of job 'llm'; run it once (even briefly: dtrain submit, then dtrain stop) and the "
        "measured step time will be used, or give --step-time");
  plan::TargetTime target = plan::expected_time_to_target(job(9'216'000, 512, Millis(7200'000)), std::nullopt, none->source);
  CHECK_FALSE(target.expected_seconds);
  CHECK(target.steps == 18000);
  CHECK(plan::verdict_text(target) == "unknown: " + none->source);
  CHECK(plan::to_json(target)["step_seconds"].is_null());
  CHECK(plan::to_json(target)["step_source"] == none->source);

  // Earlier runs without a step time: said differently.
  add_run(*db, "llm-a", "llm", kMonday, 2, 8);
  Result<JobStepTime> unmeasured = job_step_time(*db, "llm", 16, fake_metrics({}));
  REQUIRE(unmeasured.ok());
  CHECK(unmeasured->source.find("none of the 1 earlier run(s) of job 'llm' recorded a step time") == 0);
}
