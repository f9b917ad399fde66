#pragma once
// A drill grades against the job's own intent where the drill states no objective (issue 30):
// intent.recovery.max_recovery stands for `recover` (time to train again), max_lost for
// max_lost_steps or, as a duration, max_lost_time, and mode in-place requires an in-place
// recovery. An objective the drill gives wins; each one says where it came from.

#include <optional>
#include <string>

#include "launcher/drill/grading.h"
#include "launcher/runlog/run_snapshot.h"
#include "launcher/spec/job_spec.h"

namespace dtrain::drill {

/// `drill`'s objectives, each one it leaves out taken from `intent` (none when !intent.given).
/// A drill max_lost_steps also stands for the intent's max_lost as a time: both bound the same
/// loss, and the drill's word wins.
Objectives with_intent(Objectives drill, const spec::IntentSettings& intent);

/// The intent of the run whose spec copy is `spec_path` (a run directory's spec.yaml). The file
/// is untrusted: one that does not load gives no intent and a note saying why, never an error.
struct RunIntent {
  std::optional<spec::IntentSettings> intent;  ///< none: no intent, or unreadable (see note)
  std::string note;                            ///< why it could not be read; empty otherwise
};
RunIntent read_run_intent(const std::string& spec_path);

/// The median over the ranks of state.json's step_ms: what turns steps lost into time lost
/// (Objectives::max_lost_time). None when no rank reports one.
std::optional<double> median_step_ms(const RunSnapshot& state);

/// One line for the drill's output: which objectives came from the intent, or "" when none did.
std::string intent_note(const Objectives& objectives);

}  // namespace dtrain::drill
