#pragma once
// `dtrain plan --advise`: the expected time to the job's target (issue 30 item 2). Pure: the
// measured step time comes in with its source (the registry's earlier runs of the job, or
// --step-time), and every figure says where it came from.
//
//   steps     = ⌈intent.data.samples ÷ batch.global⌉, or
//               ⌈intent.data.tokens ÷ (batch.global × intent.data.sequence_length)⌉
//   expected  = steps × the measured step time
//   verdict   = expected ≤ intent.target_duration: meets the target, else misses it by the difference

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "launcher/spec/job_spec.h"

namespace dtrain::plan {

/// A step time with where it was measured ("median of 2 earlier runs of 'llm' ...", "--step-time").
struct MeasuredStepTime {
  double seconds = 0;
  std::string source;
};

struct TargetTime {
  std::optional<double> steps;             ///< the steps the intent's data takes
  std::string steps_source;                ///< the formula with its figures and keys
  std::optional<MeasuredStepTime> step;    ///< none: no measured step time
  std::string step_missing;                ///< why there is none, and how to get one
  std::optional<double> expected_seconds;  ///< steps × step
  std::optional<double> target_seconds;    ///< intent.target_duration
  /// What keeps a figure from being computed, each with the key to set ("batch.global is not
  /// set ..."); empty when every figure is there.
  std::vector<std::string> missing;

  /// expected ≤ target; none when either is unknown.
  std::optional<bool> meets() const;
};

/// The expected time to the target for `spec`'s intent at `step` (none: `step_missing` says why).
TargetTime expected_time_to_target(const spec::JobSpec& spec, const std::optional<MeasuredStepTime>& step,
                                   const std::string& step_missing);

/// "meets the target 3d (expected 2d04h)", "misses the target 3d by 1d02h (expected 4d02h)", or
/// what is missing.
std::string verdict_text(const TargetTime& target);

/// --json: {"steps", "steps_source", "step_seconds", "step_source", "expected_seconds",
/// "target_seconds", "target_source", "meets_target", "verdict", "missing"}.
nlohmann::json to_json(const TargetTime& target);

}  // namespace dtrain::plan
