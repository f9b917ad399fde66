#pragma once
// Grading a drill: from what the drill did (Injection) and what the run logged afterwards
// (events.jsonl), measure detection, recovery and loss, and hold them against the objectives.
// Pure: no files, no clocks, so unit tests grade scripted event lists.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "launcher/base/duration.h"
#include "launcher/drill/fault.h"
#include "launcher/runlog/event_log.h"

namespace dtrain::drill {

/// Where an objective came from, said next to it in the verdict: the drill's own (drill.yaml
/// objectives, --slo or the flags) or the job's intent.recovery (intent_objectives.h), which
/// fills in what the drill leaves out.
enum class ObjectiveSource { drill_spec, intent };
/// "the drill spec", "the job's intent"
const char* to_string(ObjectiveSource source);

/// Recovery objectives; an absent one is not graded.
struct Objectives {
  std::optional<Millis> detect{};           ///< injected → failure.detected
  std::optional<Millis> recover{};          ///< injected → recovery.completed (first step of the new generation)
  std::optional<int64_t> max_lost_steps{};  ///< recovery.completed steps_lost
  /// intent.recovery.max_lost as a duration: steps_lost × the ranks' step time (GradeContext).
  std::optional<Millis> max_lost_time{};
  /// intent.recovery.mode in-place: the recovery must be in place (recovery.completed action
  /// "in-place"), not a restart. Not graded for slow-storage and kill-supervisor, which no
  /// recovery in place can answer.
  bool in_place = false;
  ObjectiveSource recover_from = ObjectiveSource::drill_spec;
  ObjectiveSource lost_from = ObjectiveSource::drill_spec;  ///< max_lost_steps and max_lost_time
  ObjectiveSource mode_from = ObjectiveSource::intent;
};

/// What the drill did, recorded when it injected the fault.
struct Injection {
  Fault fault;
  int64_t wall_ms = 0;                    ///< when (Unix-epoch ms, this machine's clock)
  int pid = 0;                            ///< the process signalled; 0 when none was
  int64_t at_step = 0;                    ///< the lowest rank step at that moment
  int generation = -1;                    ///< the generation the fault hit
  std::vector<std::string> hosts;         ///< hosts running that generation's workers
  std::optional<int64_t> corrupted_step;  ///< corrupt-checkpoint: the step damaged
  std::string corrupted_file;             ///< corrupt-checkpoint: the shard damaged
};

/// One objective, met or missed, with the measured value.
struct ObjectiveResult {
  std::string name;      ///< "detect", "recover", "max_lost_steps"
  std::string limit;     ///< "10s", "100"
  std::string measured;  ///< "412ms", "37", or "never" when the run gave no value
  bool met = false;
  ObjectiveSource source = ObjectiveSource::drill_spec;
};

/// Something every recovery must show whatever the objectives ("failure detected",
/// "old generation released", ...).
struct CheckResult {
  std::string name;
  bool met = false;
  std::string detail;
};

/// How the run looked when grading, beyond its events.
struct GradeContext {
  std::string final_state;            ///< state.json "state" at the end of the drill
  bool require_success = false;       ///< the run must have ended "succeeded" (--spec mode)
  std::vector<int> surviving_pids;    ///< processes of the hit generation still alive after recovery
  /// kill-supervisor: the drill's own detection (every agent fenced), used instead of a
  /// failure.detected event (the supervisor that would log one is dead).
  std::optional<int64_t> detected_wall_ms;
  std::string detected_by;
  /// Checks the drill verified itself (on the hosts), graded like the others.
  std::vector<CheckResult> extra_checks;
  /// The ranks' median step time (state.json step_ms) when graded: turns steps lost into time
  /// lost for Objectives::max_lost_time. None: that objective is missed as "unknown".
  std::optional<double> step_ms;
};

struct FaultVerdict {
  Injection injection;
  std::optional<int64_t> detected_wall_ms;
  std::optional<int64_t> detect_ms;
  std::string detected_kind;          ///< failure.detected "kind": worker.exit, worker.hang, ...
  std::optional<int> detected_rank;
  std::optional<int64_t> recovered_wall_ms;
  std::optional<int64_t> recover_ms;
  nlohmann::json phases = nlohmann::json::object();  ///< recovery.completed "phases"
  std::optional<int64_t> resume_step;
  std::optional<int64_t> last_step;
  std::optional<int64_t> steps_lost;
  std::optional<int64_t> lost_ms;     ///< steps_lost × GradeContext::step_ms
  std::string action;                 ///< recovery.completed action: restart, in-place, ...
  std::optional<bool> resources_released;
  std::string final_state;
  std::vector<ObjectiveResult> objectives;
  std::vector<CheckResult> checks;

  bool passed() const;
  /// "detect (limit 1ms, measured 412ms)", one per objective or check not met.
  std::vector<std::string> missed() const;
};

/// Grades one fault. `events_after` are the run's events logged after the injection, oldest
/// first, up to the end of the drill's wait for it.
/// The pids an in-place recovery carried over from generation `from_gen` to the next
/// (recovery.carried_over): survivors by design, not leftovers of the hit generation.
std::vector<int> carried_over_pids(const std::vector<LoggedEvent>& events, int from_gen);

FaultVerdict grade_fault(const Injection& injection, const std::vector<LoggedEvent>& events_after,
                         const Objectives& objectives, const GradeContext& context);

nlohmann::json to_json(const FaultVerdict& verdict);

}  // namespace dtrain::drill
