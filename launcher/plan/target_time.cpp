#include "launcher/plan/target_time.h"

#include <cmath>
#include <cstdio>

#include "launcher/base/duration.h"

namespace dtrain::plan {
namespace {

std::string number_text(double value) {
  char text[48];
  std::snprintf(text, sizeof text, value >= 1e15 ? "%.3g" : "%.0f", value);
  return text;
}

std::string time_text(double seconds) {
  return format_duration(Millis(static_cast<int64_t>(std::llround(seconds * 1000))), DurationStyle::elapsed);
}

void count_steps(const spec::JobSpec& spec, TargetTime& target) {
  const spec::IntentSettings& intent = spec.intent;
  int global = spec.batch.global;
  if (intent.samples <= 0 && intent.tokens <= 0) {
    target.missing.push_back("intent.data states neither samples nor tokens: say how much the job trains on");
    return;
  }
  if (global <= 0) {
    target.missing.push_back("batch.global is not set: the steps to the end of the data need the global batch (samples a step)");
    return;
  }
  if (intent.samples > 0) {
    target.steps = std::ceil(intent.samples / global);
    target.steps_source = number_text(intent.samples) + " samples (intent.data.samples) / " + std::to_string(global) +
                          " a step (batch.global) = " + number_text(*target.steps) + " steps";
    return;
  }
  if (intent.sequence_length <= 0) {
    target.missing.push_back("intent.data.tokens needs intent.data.sequence_length (the tokens in one sample) to count steps; "
                             "add it, or give intent.data.samples");
    return;
  }
  double per_step = static_cast<double>(global) * static_cast<double>(intent.sequence_length);
  target.steps = std::ceil(intent.tokens / per_step);
  target.steps_source = number_text(intent.tokens) + " tokens (intent.data.tokens) / (" + std::to_string(global) +
                        " samples a step (batch.global) x " + std::to_string(intent.sequence_length) +
                        " tokens a sample (intent.data.sequence_length)) = " + number_text(*target.steps) + " steps";
}

}  // namespace

std::optional<bool> TargetTime::meets() const {
  if (!expected_seconds || !target_seconds) return std::nullopt;
  return *expected_seconds <= *target_seconds;
}

TargetTime expected_time_to_target(const spec::JobSpec& spec, const std::optional<MeasuredStepTime>& step,
                                   const std::string& step_missing) {
  TargetTime target;
  count_steps(spec, target);
  if (step && step->seconds > 0) {
    target.step = step;
  } else {
    target.step_missing = step_missing.empty() ? "no measured step time" : step_missing;
    target.missing.push_back(target.step_missing);
  }
  if (target.steps && target.step) target.expected_seconds = *target.steps * target.step->seconds;
  if (spec.intent.target_duration.count() > 0) {
    target.target_seconds = static_cast<double>(spec.intent.target_duration.count()) / 1000;
  } else {
    target.missing.push_back("intent.target_duration is not stated: nothing to hold the expected time to");
  }
  return target;
}

std::string verdict_text(const TargetTime& target) {
  std::optional<bool> meets = target.meets();
  if (!meets) {
    if (target.expected_seconds) return "expected " + time_text(*target.expected_seconds) + "; no target to compare with";
    return "unknown: " + (target.missing.empty() ? std::string("a figure is missing") : target.missing.front());
  }
  std::string target_text = format_duration(Millis(static_cast<int64_t>(std::llround(*target.target_seconds * 1000))));
  if (*meets) {
    return "meets the target " + target_text + " (expected " + time_text(*target.expected_seconds) + ", " +
           time_text(*target.target_seconds - *target.expected_seconds) + " to spare)";
  }
  return "misses the target " + target_text + " by " + time_text(*target.expected_seconds - *target.target_seconds) +
         " (expected " + time_text(*target.expected_seconds) + ")";
}

nlohmann::json to_json(const TargetTime& target) {
  using nlohmann::json;
  auto optional = [](const std::optional<double>& value) { return value ? json(*value) : json(nullptr); };
  json out = {{"steps", optional(target.steps)},
              {"steps_source", target.steps_source.empty() ? json(nullptr) : json(target.steps_source)},
              {"step_seconds", target.step ? json(target.step->seconds) : json(nullptr)},
              {"step_source", target.step ? json(target.step->source) : json(target.step_missing)},
              {"expected_seconds", optional(target.expected_seconds)},
              {"target_seconds", optional(target.target_seconds)},
              {"target_source", "intent.target_duration"},
              {"meets_target", target.meets() ? json(*target.meets()) : json(nullptr)},
              {"verdict", verdict_text(target)},
              {"missing", target.missing}};
  return out;
}

}  // namespace dtrain::plan
