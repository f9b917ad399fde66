// dtrain review's rules (launcher/review/review_rules.h), each held to hand-made cases: the
// month of pilot data, a run's intent objectives met / missed / not tested with their
// evidence, and the go / not yet / stop line of a tenant with every reason that applies.

#include <doctest/doctest.h>

#include "launcher/review/review_rules.h"

using namespace dtrain;
using namespace dtrain::review;

namespace {

constexpr int64_t kDay = 24 * 3600 * 1000LL;
constexpr int64_t kOct1 = 1790812800000;  // 2026-10-01T00:00:00Z

RecoveryRecord recovery(int generation, int64_t total_ms, int64_t steps_lost, const std::string& action = "restart") {
  RecoveryRecord record;
  record.generation = generation;
  record.total_ms = total_ms;
  record.steps_lost = steps_lost;
  record.action = action;
  record.cause_kind = "worker.exit";
  record.cause_host = "gpu02";
  return record;
}

spec::IntentSettings intent() {
  spec::IntentSettings settings;
  settings.given = true;
  settings.max_recovery = Millis(60'000);
  settings.max_lost_steps = 50;
  settings.target_duration = Millis(10 * 3600 * 1000LL);
  return settings;
}

const ObjectiveResult& objective(const std::vector<ObjectiveResult>& results, const std::string& name) {
  for (const ObjectiveResult& result : results) {
    if (result.objective == name) return result;
  }
  FAIL("no objective " << name);
  return results.front();
}

TenantEvidence clean_month() {
  TenantEvidence evidence;
  evidence.tenant = "vision";
  evidence.data = pilot_data({kOct1, kOct1 + 31 * kDay});
  evidence.runs = 5;
  evidence.runs_with_intent = 5;
  evidence.drills_passed = 2;
  return evidence;
}

}  // namespace

TEST_CASE("review month of data: 30 days between the first and last run hold it, 29.9 do not, none is 0 days") {
  PilotData month = pilot_data({kOct1 + 3 * kDay, kOct1, kOct1 + 30 * kDay});
  CHECK(month.days == doctest::Approx(30.0));
  CHECK(month.enough);
  CHECK(month.first_run == "2026-10-01T00:00:00.000Z");
  CHECK(month.last_run == "2026-10-31T00:00:00.000Z");
  PilotData short_of = pilot_data({kOct1, kOct1 + 30 * kDay - 2 * 3600 * 1000LL});
  CHECK(short_of.days == doctest::Approx(29.9167).epsilon(0.001));
  CHECK_FALSE(short_of.enough);
  PilotData none = pilot_data({});
  CHECK(none.days == 0);
  CHECK_FALSE(none.enough);
  CHECK(none.first_run.empty());
  CHECK(pilot_data({kOct1, kOct1 + 8 * kDay}, 7).enough);  // the threshold is the caller's
}

TEST_CASE("review objectives: met, missed and not tested, each with the figure that decided it") {
  RunOutcome outcome;
  outcome.recoveries = {recovery(1, 12'000, 20), recovery(2, 95'000, 40)};
  outcome.duration_ms = 9 * 3600 * 1000LL;
  outcome.finished = true;
  std::vector<ObjectiveResult> results = evaluate_objectives(intent(), outcome);
  REQUIRE(results.size() == 4);
  CHECK(objective(results, "max_recovery").status == std::string(kMissed));
  CHECK(objective(results, "max_recovery").wanted == "1m");
  CHECK(objective(results, "max_recovery").evidence.find("1m35s") != std::string::npos);
  CHECK(objective(results, "max_recovery").evidence.find("gen 2") != std::string::npos);
  CHECK(objective(results, "max_lost").status == std::string(kMet));
  CHECK(objective(results, "max_lost").evidence.find("40 steps") != std::string::npos);
  CHECK(objective(results, "mode").status == std::string(kMet));  // restart accepts any recovery
  CHECK(objective(results, "target_duration").status == std::string(kMet));

  outcome.recoveries = {recovery(1, 12'000, 51)};
  outcome.duration_ms = 11 * 3600 * 1000LL;
  results = evaluate_objectives(intent(), outcome);
  CHECK(objective(results, "max_recovery").status == std::string(kMet));
  CHECK(objective(results, "max_lost").status == std::string(kMissed));
  CHECK(objective(results, "target_duration").status == std::string(kMissed));

  // No recovery happened: the recovery objectives are not tested (neither met nor missed).
  outcome.recoveries.clear();
  outcome.finished = false;
  outcome.duration_ms = 3600 * 1000LL;
  results = evaluate_objectives(intent(), outcome);
  CHECK(objective(results, "max_recovery").status == std::string(kNotTested));
  CHECK(objective(results, "max_lost").status == std::string(kNotTested));
  CHECK(objective(results, "mode").status == std::string(kNotTested));
  CHECK(objective(results, "target_duration").status == std::string(kNotTested));  // still going, under the target
  outcome.duration_ms = 12 * 3600 * 1000LL;
  CHECK(objective(evaluate_objectives(intent(), outcome), "target_duration").status == std::string(kMissed));

  CHECK(evaluate_objectives(spec::IntentSettings{}, outcome).empty());  // no intent, nothing to grade
}

TEST_CASE("review objectives: in-place mode is missed by a restart, lost time needs a step time") {
  spec::IntentSettings settings;
  settings.given = true;
  settings.mode = spec::IntentSettings::RecoveryMode::in_place;
  settings.max_lost_time = Millis(30'000);
  RunOutcome outcome;
  outcome.recoveries = {recovery(1, 5'000, 10, "in-place"), recovery(2, 9'000, 10, "restart")};
  outcome.recoveries[1].fallback = "rank 3 missing";
  std::vector<ObjectiveResult> results = evaluate_objectives(settings, outcome);
  CHECK(objective(results, "mode").status == std::string(kMissed));
  CHECK(objective(results, "mode").evidence.find("1 of 2") != std::string::npos);
  CHECK(objective(results, "mode").evidence.find("rank 3 missing") != std::string::npos);
  CHECK(objective(results, "max_lost").status == std::string(kNotTested));  // no step time known
  outcome.step_ms = 2'000;  // 10 steps × 2 s = 20 s ≤ 30 s
  CHECK(objective(evaluate_objectives(settings, outcome), "max_lost").status == std::string(kMet));
  outcome.step_ms = 4'000;  // 40 s > 30 s
  CHECK(objective(evaluate_objectives(settings, outcome), "max_lost").status == std::string(kMissed));
  outcome.recoveries.pop_back();
  CHECK(objective(evaluate_objectives(settings, outcome), "mode").status == std::string(kMet));
}

TEST_CASE("review verdict: go needs a month, a passed drill, an intent, no miss and nothing left behind") {
  TenantVerdict go = decide_tenant(clean_month());
  CHECK(go.verdict == std::string(kGo));
  REQUIRE(go.reasons.size() == 1);
  CHECK(go.reasons[0].find("31.0 days") != std::string::npos);

  TenantEvidence short_month = clean_month();
  short_month.data = pilot_data({kOct1, kOct1 + 12 * kDay});
  TenantVerdict not_yet = decide_tenant(short_month);
  CHECK(not_yet.verdict == std::string(kNotYet));
  REQUIRE(not_yet.reasons.size() == 1);
  CHECK(not_yet.reasons[0].find("12.0 days") != std::string::npos);

  TenantEvidence missed = clean_month();
  missed.missed_objectives = {"run r1: max_recovery 1m (longest 95 s)"};
  CHECK(decide_tenant(missed).verdict == std::string(kNotYet));
  CHECK(decide_tenant(missed).objectives_missed == 1);
  TenantEvidence undrilled = clean_month();
  undrilled.drills_passed = 0;
  CHECK(decide_tenant(undrilled).verdict == std::string(kNotYet));
  TenantEvidence no_intent = clean_month();
  no_intent.runs_with_intent = 0;
  CHECK(decide_tenant(no_intent).verdict == std::string(kNotYet));
}

TEST_CASE("review verdict: a failed drill or a leftover process is stop, whatever else holds, with every reason") {
  TenantEvidence failed = clean_month();
  failed.failed_drills = {"drill-1 on run r2: fail (kill-rank:1: recovered in 95 s)"};
  TenantVerdict stop = decide_tenant(failed);
  CHECK(stop.verdict == std::string(kStop));
  CHECK(stop.drills_failed == 1);
  CHECK(stop.reasons.front().find("drill failed") == 0);

  TenantEvidence leftover = clean_month();
  leftover.leftovers = {"run r3: 2 processes left on gpu03 after gen 1"};
  leftover.data = pilot_data({kOct1});  // also short of a month: both reasons are listed, stop first
  TenantVerdict both = decide_tenant(leftover);
  CHECK(both.verdict == std::string(kStop));
  REQUIRE(both.reasons.size() == 2);
  CHECK(both.reasons[0].find("left behind") == 0);
  CHECK(both.reasons[1].find("0.0 days") == 0);
  CHECK(rules().size() == 3);
}
