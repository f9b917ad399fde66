// The review's rules (review_rules.h): pure, each on one screen.

#include "launcher/review/review_rules.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "launcher/base/clock.h"
#include "launcher/base/duration.h"

namespace dtrain::review {
namespace {

constexpr double kDayMs = 24.0 * 3600 * 1000;

std::string ms_text(int64_t ms) { return format_duration(Millis(ms), DurationStyle::report); }

std::string days_text(double days) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f", days);
  return text;
}

ObjectiveResult result(std::string objective, std::string wanted, const char* status, std::string evidence) {
  return {std::move(objective), std::move(wanted), status, std::move(evidence)};
}

/// The recovery that took longest (the first of equals), or nullptr.
const RecoveryRecord* longest_recovery(const std::vector<RecoveryRecord>& recoveries) {
  const RecoveryRecord* longest = nullptr;
  for (const RecoveryRecord& recovery : recoveries) {
    if (!longest || recovery.total_ms > longest->total_ms) longest = &recovery;
  }
  return longest;
}

const RecoveryRecord* most_steps_lost(const std::vector<RecoveryRecord>& recoveries) {
  const RecoveryRecord* most = nullptr;
  for (const RecoveryRecord& recovery : recoveries) {
    if (!most || recovery.steps_lost > most->steps_lost) most = &recovery;
  }
  return most;
}

std::string where(const RecoveryRecord& recovery) {
  return "gen " + std::to_string(recovery.generation) + ", " + recovery.cause_kind +
         (recovery.cause_host.empty() ? "" : " on " + recovery.cause_host);
}

ObjectiveResult max_recovery_result(Millis wanted, const RunOutcome& outcome) {
  std::string limit = format_duration(wanted);
  const RecoveryRecord* longest = longest_recovery(outcome.recoveries);
  if (!longest) return result("max_recovery", limit, kNotTested, "no recovery in this run");
  std::string evidence = "longest of " + std::to_string(outcome.recoveries.size()) + " recoveries: " +
                         ms_text(longest->total_ms) + " (" + where(*longest) + ")";
  return result("max_recovery", limit, longest->total_ms <= wanted.count() ? kMet : kMissed, evidence);
}

ObjectiveResult max_lost_result(const spec::IntentSettings& intent, const RunOutcome& outcome) {
  bool in_steps = intent.max_lost_steps > 0;
  std::string limit = in_steps ? std::to_string(intent.max_lost_steps) + " steps" : format_duration(intent.max_lost_time);
  const RecoveryRecord* most = most_steps_lost(outcome.recoveries);
  if (!most) return result("max_lost", limit, kNotTested, "no recovery in this run");
  std::string evidence = "most lost by one recovery: " + std::to_string(most->steps_lost) + " steps (" + where(*most) + ")";
  if (in_steps) return result("max_lost", limit, most->steps_lost <= intent.max_lost_steps ? kMet : kMissed, evidence);
  if (!outcome.step_ms) {
    return result("max_lost", limit, kNotTested, evidence + "; no step time known (fewer than two checkpoints)");
  }
  auto lost_ms = static_cast<int64_t>(std::llround(static_cast<double>(most->steps_lost) * *outcome.step_ms));
  evidence += " × " + ms_text(static_cast<int64_t>(std::llround(*outcome.step_ms))) + " a step = " + ms_text(lost_ms);
  return result("max_lost", limit, lost_ms <= intent.max_lost_time.count() ? kMet : kMissed, evidence);
}

ObjectiveResult mode_result(const spec::IntentSettings& intent, const RunOutcome& outcome) {
  std::string wanted = spec::to_string(intent.mode);
  if (outcome.recoveries.empty()) return result("mode", wanted, kNotTested, "no recovery in this run");
  size_t in_place = 0;
  for (const RecoveryRecord& recovery : outcome.recoveries) in_place += recovery.action == "in-place" ? 1 : 0;
  std::string evidence = std::to_string(in_place) + " of " + std::to_string(outcome.recoveries.size()) +
                         " recoveries in place";
  if (intent.mode == spec::IntentSettings::RecoveryMode::restart) {
    return result("mode", wanted, kMet, evidence + " (a restart is acceptable)");
  }
  for (const RecoveryRecord& recovery : outcome.recoveries) {
    if (recovery.action != "in-place") {
      evidence += "; " + where(recovery) + " recovered by " + recovery.action +
                  (recovery.fallback.empty() ? "" : " (fell back: " + recovery.fallback + ")");
      break;
    }
  }
  return result("mode", wanted, in_place == outcome.recoveries.size() ? kMet : kMissed, evidence);
}

ObjectiveResult duration_result(Millis target, const RunOutcome& outcome) {
  std::string wanted = format_duration(target);
  if (!outcome.duration_ms) return result("target_duration", wanted, kNotTested, "the run never started training");
  std::string took = format_duration(Millis(*outcome.duration_ms), DurationStyle::elapsed);
  if (!outcome.finished) {
    if (*outcome.duration_ms > target.count()) return result("target_duration", wanted, kMissed, "still going after " + took);
    return result("target_duration", wanted, kNotTested, "still going, " + took + " so far");
  }
  return result("target_duration", wanted, *outcome.duration_ms <= target.count() ? kMet : kMissed, "took " + took);
}

}  // namespace

PilotData pilot_data(const std::vector<int64_t>& submitted_ms, int required_days) {
  PilotData data;
  data.required_days = required_days;
  if (submitted_ms.empty()) return data;
  auto [first, last] = std::minmax_element(submitted_ms.begin(), submitted_ms.end());
  data.first_run = format_timestamp_utc(*first);
  data.last_run = format_timestamp_utc(*last);
  data.days = static_cast<double>(*last - *first) / kDayMs;
  data.enough = data.days >= required_days;
  return data;
}

std::vector<ObjectiveResult> evaluate_objectives(const spec::IntentSettings& intent, const RunOutcome& outcome) {
  std::vector<ObjectiveResult> results;
  if (!intent.given) return results;
  if (intent.max_recovery.count() > 0) results.push_back(max_recovery_result(intent.max_recovery, outcome));
  if (intent.max_lost_steps > 0 || intent.max_lost_time.count() > 0) results.push_back(max_lost_result(intent, outcome));
  results.push_back(mode_result(intent, outcome));
  if (intent.target_duration.count() > 0) results.push_back(duration_result(intent.target_duration, outcome));
  return results;
}

TenantVerdict decide_tenant(const TenantEvidence& evidence) {
  TenantVerdict verdict;
  verdict.tenant = evidence.tenant;
  verdict.data = evidence.data;
  verdict.runs = evidence.runs;
  verdict.runs_with_intent = evidence.runs_with_intent;
  verdict.drills_passed = evidence.drills_passed;
  verdict.drills_failed = static_cast<int>(evidence.failed_drills.size());
  verdict.objectives_missed = static_cast<int>(evidence.missed_objectives.size());
  verdict.leftovers = static_cast<int>(evidence.leftovers.size());
  std::vector<std::string> stop, not_yet;
  for (const std::string& drill : evidence.failed_drills) stop.push_back("drill failed: " + drill);
  for (const std::string& leftover : evidence.leftovers) stop.push_back("left behind: " + leftover);
  if (!evidence.data.enough) {
    not_yet.push_back(days_text(evidence.data.days) + " days of data, under the " +
                      std::to_string(evidence.data.required_days) + " the pilot needs");
  }
  for (const std::string& missed : evidence.missed_objectives) not_yet.push_back("objective missed: " + missed);
  if (evidence.drills_passed == 0) not_yet.push_back("no drill passed in the period: recovery is not proven");
  if (evidence.runs_with_intent == 0) not_yet.push_back("no run states an intent: nothing to grade against");
  if (!stop.empty()) {
    verdict.verdict = kStop;
    verdict.reasons = stop;
    verdict.reasons.insert(verdict.reasons.end(), not_yet.begin(), not_yet.end());
  } else if (!not_yet.empty()) {
    verdict.verdict = kNotYet;
    verdict.reasons = not_yet;
  } else {
    verdict.verdict = kGo;
    verdict.reasons.push_back(days_text(evidence.data.days) + " days of data, " + std::to_string(evidence.drills_passed) +
                              " drills passed, every objective of " + std::to_string(evidence.runs_with_intent) +
                              " runs with an intent met or not tested, nothing left behind");
  }
  return verdict;
}

std::vector<std::string> rules() {
  return {
      "stop: a drill in the period failed or could not run, or a retry left something behind (a release with "
      "processes remaining, a host that never confirmed its release, a drill's leftover processes)",
      "not yet: under " + std::to_string(kPilotDays) + " days between the tenant's first and last run in scope, an "
      "intent objective missed, no drill passed in the period, or no run stating an intent",
      "go: none of the above",
  };
}

}  // namespace dtrain::review
