#include "launcher/report/intent_grades.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "launcher/base/duration.h"
#include "launcher/events/event.h"
#include "launcher/metrics/goodput.h"

namespace dtrain::report {
namespace {

using Intent = spec::IntentSettings;

/// 7e9 → "7B", 2e12 → "2T", 1.5e6 → "1.5M": as the intent is written.
std::string count_text(double value) {
  static const std::pair<double, const char*> kUnits[] = {{1e12, "T"}, {1e9, "B"}, {1e6, "M"}, {1e3, "K"}};
  for (const auto& [scale, unit] : kUnits) {
    if (value >= scale) {
      char text[32];
      std::snprintf(text, sizeof text, "%.3g%s", value / scale, unit);
      return text;
    }
  }
  char text[32];
  std::snprintf(text, sizeof text, "%.0f", value);
  return text;
}

std::string gb_text(double bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f GB", bytes / 1e9);
  return text;
}

std::string duration_text(Millis duration) { return format_duration(duration, DurationStyle::report); }

std::vector<std::string> stated(const Intent& intent) {
  std::vector<std::string> lines;
  if (intent.parameters > 0 || intent.state_bytes > 0) {
    std::string model = "model: ";
    if (intent.parameters > 0) {
      model += count_text(intent.parameters) + " parameters, " + spec::to_string(intent.precision) + ", " +
               spec::to_string(intent.optimizer);
    }
    if (intent.state_bytes > 0) {
      model += std::string(intent.parameters > 0 ? "; " : "") + gb_text(static_cast<double>(intent.state_bytes)) +
               " of weights, gradients and optimizer state";
    }
    lines.push_back(model);
  }
  if (intent.samples > 0 || intent.tokens > 0) {
    std::string data = "data: ";
    if (intent.samples > 0) data += count_text(intent.samples) + " samples";
    if (intent.tokens > 0) data += std::string(intent.samples > 0 ? ", " : "") + count_text(intent.tokens) + " tokens";
    lines.push_back(data);
  }
  if (intent.target_duration.count() > 0) lines.push_back("target duration: " + format_duration(intent.target_duration));
  if (intent.gpu_memory_bytes > 0) lines.push_back("GPU memory: " + gb_text(static_cast<double>(intent.gpu_memory_bytes)) + " per GPU");
  std::string recovery = "recovery: mode " + std::string(spec::to_string(intent.mode));
  if (intent.max_recovery.count() > 0) recovery += ", training again within " + format_duration(intent.max_recovery);
  if (intent.max_lost_steps > 0) recovery += ", at most " + std::to_string(intent.max_lost_steps) + " steps lost";
  if (intent.max_lost_time.count() > 0) recovery += ", at most " + format_duration(intent.max_lost_time) + " of training lost";
  lines.push_back(recovery);
  return lines;
}

std::string cause_text(const events::FailureCause& cause) {
  std::string text = events::to_string(cause.kind);
  if (cause.rank) text += ": rank " + std::to_string(*cause.rank) + (cause.host.empty() ? "" : " on " + cause.host);
  else if (!cause.host.empty()) text += ": " + cause.host;
  return text;
}

void check_recovery(const Intent& intent, RecoveryAgainstIntent& recovery) {
  if (intent.max_recovery.count() > 0) {
    recovery.checks.push_back({"max_recovery", format_duration(intent.max_recovery),
                               recovery.time_to_train_ms ? duration_text(Millis(*recovery.time_to_train_ms)) : "unknown",
                               recovery.time_to_train_ms && *recovery.time_to_train_ms <= intent.max_recovery.count()});
  }
  if (intent.max_lost_steps > 0) {
    recovery.checks.push_back({"max_lost", std::to_string(intent.max_lost_steps) + " steps",
                               std::to_string(recovery.steps_lost) + " steps", recovery.steps_lost <= intent.max_lost_steps});
  } else if (intent.max_lost_time.count() > 0) {
    recovery.checks.push_back({"max_lost", format_duration(intent.max_lost_time),
                               recovery.lost_ms ? duration_text(Millis(*recovery.lost_ms))
                                                : std::to_string(recovery.steps_lost) + " steps, step time unknown",
                               recovery.lost_ms && *recovery.lost_ms <= intent.max_lost_time.count()});
  }
  std::string action = recovery.action.empty() ? "unknown" : recovery.action;
  if (intent.mode == Intent::RecoveryMode::in_place) {
    recovery.checks.push_back({"mode", "in-place", action, recovery.action == "in-place"});
  } else {
    recovery.checks.push_back({"mode", "restart (any recovery)", action, true});
  }
}

std::vector<RecoveryAgainstIntent> recoveries(const RunRecord& record, const Intent& intent) {
  std::vector<RecoveryAgainstIntent> out;
  const LoggedEvent* detected = nullptr;
  for (const LoggedEvent& event : record.events) {
    if (std::holds_alternative<events::FailureDetected>(event.event)) {
      detected = &event;
      continue;
    }
    const auto* completed = std::get_if<events::RecoveryCompleted>(&event.event);
    if (!completed) continue;
    RecoveryAgainstIntent recovery;
    recovery.generation = event.gen.value_or(-1);
    recovery.cause = cause_text(completed->cause);
    recovery.action = completed->action;
    recovery.steps_lost = std::max<int64_t>(0, completed->steps_lost);
    recovery.evidence = "recovery.completed at " + event.ts + " (gen " + std::to_string(recovery.generation) + ", steps_lost " +
                        std::to_string(completed->steps_lost) +
                        (completed->action.empty() ? "" : ", action " + completed->action) + ")";
    if (detected) {
      const auto& failure = std::get<events::FailureDetected>(detected->event);
      recovery.cause = cause_text(failure.cause);
      std::optional<int64_t> completed_ms = event.wall_ms(), detected_ms = detected->wall_ms();
      if (completed_ms && detected_ms) {
        recovery.time_to_train_ms = std::max<int64_t>(0, *completed_ms - *detected_ms + std::max<int64_t>(0, failure.latency_ms.value_or(0)));
      }
      recovery.evidence += ", after failure.detected at " + detected->ts +
                           (failure.latency_ms ? " (observable " + duration_text(Millis(*failure.latency_ms)) + " earlier)" : "");
    }
    // The generation that failed: the detection's stamp, else the one before this.
    int failed = detected && detected->gen ? *detected->gen : recovery.generation - 1;
    if (recovery.steps_lost == 0) {
      recovery.lost_ms = 0;
    } else if (std::optional<double> step_ms = median_step_ms(record.training, failed)) {
      recovery.lost_ms = std::llround(static_cast<double>(recovery.steps_lost) * *step_ms);
    }
    check_recovery(intent, recovery);
    out.push_back(std::move(recovery));
    detected = nullptr;
  }
  return out;
}

void check_target(const RunRecord& record, const Intent& intent, IntentGrades& grades) {
  if (intent.target_duration.count() <= 0) return;
  metrics::Goodput goodput = metrics::goodput_from_events(record.events);
  double training_seconds = std::max(0.0, goodput.wall_seconds - goodput.launch_seconds - goodput.shutdown_seconds);
  auto training_ms = static_cast<int64_t>(std::llround(training_seconds * 1000));
  bool within = training_ms <= intent.target_duration.count();
  std::string measured = duration_text(Millis(training_ms));
  if (!goodput.finished) measured += " so far (the run has not finished)";
  grades.target = IntentCheck{"target_duration", format_duration(intent.target_duration), measured, within};
  grades.target_evidence = "events.jsonl: the first step to the end of training (wall " +
                           duration_text(Millis(std::llround(goodput.wall_seconds * 1000))) + " less launch " +
                           duration_text(Millis(std::llround(goodput.launch_seconds * 1000))) + " and shutdown " +
                           duration_text(Millis(std::llround(goodput.shutdown_seconds * 1000))) + ", as goodput counts them)";
}

}  // namespace

IntentGrades grade_intent(const RunRecord& record) {
  IntentGrades grades;
  grades.unread = record.intent_unread;
  if (!record.intent.given) return grades;
  grades.given = true;
  grades.stated = stated(record.intent);
  grades.recoveries = recoveries(record, record.intent);
  check_target(record, record.intent, grades);
  return grades;
}

}  // namespace dtrain::report
