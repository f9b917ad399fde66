#include "launcher/drill/intent_objectives.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "launcher/base/duration.h"
#include "launcher/base/strings.h"
#include "launcher/spec/spec_loader.h"

namespace dtrain::drill {

Objectives with_intent(Objectives drill, const spec::IntentSettings& intent) {
  if (!intent.given) return drill;
  if (!drill.recover && intent.max_recovery.count() > 0) {
    drill.recover = intent.max_recovery;
    drill.recover_from = ObjectiveSource::intent;
  }
  if (!drill.max_lost_steps && !drill.max_lost_time) {
    if (intent.max_lost_steps > 0) {
      drill.max_lost_steps = intent.max_lost_steps;
      drill.lost_from = ObjectiveSource::intent;
    } else if (intent.max_lost_time.count() > 0) {
      drill.max_lost_time = intent.max_lost_time;
      drill.lost_from = ObjectiveSource::intent;
    }
  }
  if (!drill.in_place && intent.mode == spec::IntentSettings::RecoveryMode::in_place) {
    drill.in_place = true;
    drill.mode_from = ObjectiveSource::intent;
  }
  return drill;
}

RunIntent read_run_intent(const std::string& spec_path) {
  spec::LoadResult loaded = spec::load_job_spec(spec_path, {}, spec::EnvValues::names_only);
  if (!loaded.ok()) {
    std::string first = loaded.diagnostics.empty() ? "it does not load" : loaded.diagnostics.front().to_string();
    return {std::nullopt, "the run's spec.yaml gives no intent to grade against (" + printable(first, 300) + ")"};
  }
  if (!loaded.spec->intent.given) return {};
  return {loaded.spec->intent, ""};
}

std::optional<double> median_step_ms(const RunSnapshot& state) {
  std::vector<double> steps;
  for (const RunSnapshot::Rank& rank : state.ranks) {
    if (rank.metrics.step_ms && std::isfinite(*rank.metrics.step_ms) && *rank.metrics.step_ms > 0) steps.push_back(*rank.metrics.step_ms);
  }
  if (steps.empty()) return std::nullopt;
  std::sort(steps.begin(), steps.end());
  size_t middle = steps.size() / 2;
  return steps.size() % 2 ? steps[middle] : (steps[middle - 1] + steps[middle]) / 2;
}

std::string intent_note(const Objectives& objectives) {
  std::vector<std::string> taken;
  if (objectives.recover && objectives.recover_from == ObjectiveSource::intent) {
    taken.push_back("recover " + format_duration(*objectives.recover) + " (max_recovery)");
  }
  if (objectives.lost_from == ObjectiveSource::intent) {
    if (objectives.max_lost_steps) taken.push_back("max_lost_steps " + std::to_string(*objectives.max_lost_steps) + " (max_lost)");
    if (objectives.max_lost_time) taken.push_back("max_lost_time " + format_duration(*objectives.max_lost_time) + " (max_lost)");
  }
  if (objectives.in_place && objectives.mode_from == ObjectiveSource::intent) taken.push_back("mode in-place");
  if (taken.empty()) return "";
  return join(taken, ", ") + " from the job's intent (intent.recovery in its spec.yaml)";
}

}  // namespace dtrain::drill
