#include "launcher/drill/grading.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <set>

#include "launcher/base/clock.h"
#include "launcher/events/event.h"
#include "launcher/runlog/event_log.h"

namespace dtrain::drill {

using nlohmann::json;

namespace {

using Events = std::vector<LoggedEvent>;

/// The event as a T, or nullptr when it is another.
template <class T>
const T* as(const LoggedEvent& event) {
  return std::get_if<T>(&event.event);
}

/// The first event that is a T at or after index `from`, or nullptr.
template <class T>
const LoggedEvent* first_of(const Events& events, size_t from = 0) {
  for (size_t i = from; i < events.size(); ++i) {
    if (as<T>(events[i])) return &events[i];
  }
  return nullptr;
}

size_t index_of(const Events& events, const LoggedEvent* event) {
  return event ? static_cast<size_t>(event - events.data()) : events.size();
}

/// The failure a failure.detected names, into the verdict.
void take_detection(FaultVerdict& verdict, const LoggedEvent& detected) {
  verdict.detected_wall_ms = detected.wall_ms();
  const events::FailureCause& cause = std::get<events::FailureDetected>(detected.event).cause;
  verdict.detected_kind = events::to_string(cause.kind);
  verdict.detected_rank = cause.rank;
}

void grade_duration(FaultVerdict& verdict, const char* name, const std::optional<Millis>& limit,
                    const std::optional<int64_t>& measured, ObjectiveSource source) {
  if (!limit) return;
  ObjectiveResult result;
  result.name = name;
  result.limit = format_duration(*limit);
  result.measured = measured ? format_duration(Millis(*measured)) : "never";
  result.met = measured && *measured <= limit->count();
  result.source = source;
  verdict.objectives.push_back(result);
}

void grade_lost_steps(FaultVerdict& verdict, const std::optional<int64_t>& limit, const std::optional<int64_t>& lost,
                      ObjectiveSource source) {
  if (!limit) return;
  verdict.objectives.push_back({"max_lost_steps", std::to_string(*limit), lost ? std::to_string(*lost) : "never",
                                lost && *lost <= *limit, source});
}

// intent.recovery.max_lost as time: the steps redone, at the ranks' step time. No lost steps
// cost no time whatever the step time; lost steps without a step time cannot be held to it.
void grade_lost_time(FaultVerdict& verdict, const Objectives& objectives, const GradeContext& context) {
  if (verdict.steps_lost && (*verdict.steps_lost == 0 || context.step_ms)) {
    verdict.lost_ms = *verdict.steps_lost == 0 ? 0 : std::llround(static_cast<double>(*verdict.steps_lost) * *context.step_ms);
  }
  if (!objectives.max_lost_time) return;
  ObjectiveResult result{"max_lost_time", format_duration(*objectives.max_lost_time), "never", false, objectives.lost_from};
  if (verdict.lost_ms) {
    result.measured = format_duration(Millis(*verdict.lost_ms));
    result.met = *verdict.lost_ms <= objectives.max_lost_time->count();
  } else if (verdict.steps_lost) {
    result.measured = std::to_string(*verdict.steps_lost) + " steps, step time unknown";
  }
  verdict.objectives.push_back(result);
}

// intent.recovery.mode in-place: the run must have recovered without a restart.
void grade_mode(FaultVerdict& verdict, const Objectives& objectives, const Injection& injection) {
  if (!objectives.in_place || injection.fault.kind == FaultKind::kill_supervisor) return;
  verdict.objectives.push_back({"mode", "in-place", verdict.action.empty() ? "never" : verdict.action,
                                verdict.action == "in-place", objectives.mode_from});
}

void check(FaultVerdict& verdict, std::string name, bool met, std::string detail) {
  verdict.checks.push_back({std::move(name), met, std::move(detail)});
}

bool is_host_fault(FaultKind kind) { return kind == FaultKind::kill_host || kind == FaultKind::partition_host; }

/// The first plan.generation of a generation after `generation`, or nullptr.
const events::PlanGeneration* next_plan_after(const Events& events, int generation) {
  for (const LoggedEvent& event : events) {
    const auto* plan = as<events::PlanGeneration>(event);
    if (plan && event.gen.value_or(-1) > generation) return plan;
  }
  return nullptr;
}

// A host fault must be seen as the host's loss, and the next generation must run without it
// (shrunk over the others, or with a spare in its place).
void grade_host_loss(FaultVerdict& verdict, const Injection& injection, const Events& events) {
  const std::string& host = injection.fault.target;
  const events::HostLost* lost = nullptr;
  for (const LoggedEvent& event : events) {
    if (const auto* host_lost = as<events::HostLost>(event); host_lost && host_lost->host == host) {
      lost = host_lost;
      break;
    }
  }
  check(verdict, "host lost", lost != nullptr,
        lost ? host + ": " + (lost->reason.empty() ? "lost" : lost->reason) +
                   (lost->silent_ms ? " (silent " + std::to_string(*lost->silent_ms) + "ms)" : "")
             : "no host.lost for " + host + " after the injection");
  const events::PlanGeneration* plan = next_plan_after(events, injection.generation);
  bool without = false;
  std::string detail = "no next generation was planned";
  if (plan) {
    without = std::find(plan->hosts.begin(), plan->hosts.end(), host) == plan->hosts.end();
    std::string joined;
    for (const std::string& name : plan->hosts) joined += (joined.empty() ? "" : ", ") + name;
    detail = "generation " + std::to_string(plan->gen) + " runs " + std::to_string(plan->world_size) + " rank(s) on " +
             joined + (without ? "" : " (still including " + host + ")");
  }
  check(verdict, "host left out of the new generation", without, detail);
}

// In place, the hit generation is not stopped: every host that still has its workers must have
// carried them over (recovery.carried_over), and the faulted process must not be among them.
void grade_carry_over(FaultVerdict& verdict, const Injection& injection, const Events& events) {
  std::set<std::string> carried_hosts;
  for (const LoggedEvent& event : events) {
    const auto* carried = as<events::RecoveryCarriedOver>(event);
    if (carried && event.gen.value_or(-1) == injection.generation + 1) carried_hosts.insert(carried->host);
  }
  std::vector<std::string> missing;
  for (const std::string& host : injection.hosts) {
    if (is_host_fault(injection.fault.kind) && host == injection.fault.target) continue;
    if (!carried_hosts.count(host)) missing.push_back(host);
  }
  std::vector<int> carried = carried_over_pids(events, injection.generation);
  bool victim_carried = injection.pid > 0 && std::find(carried.begin(), carried.end(), injection.pid) != carried.end();
  bool ok = missing.empty() && !victim_carried;
  verdict.resources_released = ok;
  std::string detail = ok ? std::to_string(carried.size()) + " worker(s) on " + std::to_string(carried_hosts.size()) +
                                " host(s) carried over to generation " + std::to_string(injection.generation + 1) +
                                "; the faulted process was not"
                          : victim_carried ? "the faulted pid " + std::to_string(injection.pid) + " was carried over"
                                           : "no carry-over seen from " + missing.front();
  check(verdict, "survivors carried over in place", ok, detail);
}

// Every host of the hit generation must report its processes gone (resources.released with
// nothing remaining) before the next generation is planned: otherwise the old and the new
// generation ran side by side.
void grade_release(FaultVerdict& verdict, const Injection& injection, const Events& events) {
  const LoggedEvent* next_plan = nullptr;
  for (const LoggedEvent& event : events) {
    if (as<events::PlanGeneration>(event) && event.gen.value_or(-1) > injection.generation) {
      next_plan = &event;
      break;
    }
  }
  std::set<std::string> released;
  std::vector<std::string> unclean;
  for (size_t i = 0; i < index_of(events, next_plan); ++i) {
    const auto* release = as<events::ResourcesReleased>(events[i]);
    if (!release || events[i].gen.value_or(-2) != injection.generation) continue;
    if (release->remaining == 0) {
      released.insert(release->host);
    } else {
      unclean.push_back(release->host + " (" + std::to_string(release->remaining) + " left)");
    }
  }
  std::vector<std::string> missing;
  for (const std::string& host : injection.hosts) {
    // A killed or cut-off host cannot report: the drill checks that host itself.
    if (is_host_fault(injection.fault.kind) && host == injection.fault.target) continue;
    if (!released.count(host)) missing.push_back(host);
  }
  bool ok = next_plan && missing.empty() && unclean.empty();
  verdict.resources_released = ok;
  std::string detail;
  if (!next_plan) {
    detail = "no next generation was planned";
  } else if (ok) {
    detail = "every process of generation " + std::to_string(injection.generation) + " gone on " +
             std::to_string(released.size()) + " host(s) before generation " +
             std::to_string(next_plan->gen.value_or(-1)) + " was planned";
  } else {
    for (const std::string& host : missing) detail += (detail.empty() ? "" : "; ") + host + ": no release seen";
    for (const std::string& host : unclean) detail += (detail.empty() ? "" : "; ") + host;
  }
  check(verdict, "old generation released", ok, detail);
}

void grade_final_state(FaultVerdict& verdict, const GradeContext& context) {
  verdict.final_state = context.final_state;
  bool ok = context.require_success ? context.final_state == "succeeded"
                                    : context.final_state == "running" || context.final_state == "succeeded";
  check(verdict, "final state", ok,
        context.final_state + (ok ? "" : context.require_success ? " (expected succeeded)" : " (expected running or succeeded)"));
}

// A host the health gate left out (issue 29) must not be taken back later in the drill: no
// worker of a later generation may start on it. Only graded when a check failed.
void grade_health_gate(FaultVerdict& verdict, const Events& events) {
  std::set<std::string> left_out;
  std::string taken_back;
  for (const LoggedEvent& event : events) {
    if (const auto* health = as<events::HostHealth>(event);
        health && health->verdict == events::HealthCheckResult::kFail && health->action == events::HostHealth::kLeftOut) {
      left_out.insert(health->host);
    } else if (const auto* started = as<events::WorkerStarted>(event);
               started && left_out.count(started->host) && taken_back.empty()) {
      taken_back = started->host + " (rank " + std::to_string(started->rank) + " started there)";
    }
  }
  if (left_out.empty()) return;
  std::string hosts;
  for (const std::string& host : left_out) hosts += (hosts.empty() ? "" : ", ") + host;
  check(verdict, "unhealthy host not taken back", taken_back.empty(),
        taken_back.empty() ? hosts + " failed a health check and ran nothing afterwards"
                           : "failed a health check and was used again: " + taken_back);
}

void grade_recovery(FaultVerdict& verdict, const Injection& injection, const Events& events,
                    const Objectives& objectives, const GradeContext& context) {
  // kill-supervisor: the supervisor that would log failure.detected is dead; the drill's own
  // observation (every agent fenced) is the detection, and the resumed supervisor's
  // recovery.completed {kind: supervisor.lost} the recovery.
  bool supervisor_fault = injection.fault.kind == FaultKind::kill_supervisor;
  const LoggedEvent* detected = supervisor_fault ? nullptr : first_of<events::FailureDetected>(events);
  if (supervisor_fault && context.detected_wall_ms) {
    verdict.detected_wall_ms = context.detected_wall_ms;
    verdict.detect_ms = std::max<int64_t>(0, *context.detected_wall_ms - injection.wall_ms);
    verdict.detected_kind = context.detected_by;
  }
  if (detected) {
    take_detection(verdict, *detected);
    if (verdict.detected_wall_ms) verdict.detect_ms = std::max<int64_t>(0, *verdict.detected_wall_ms - injection.wall_ms);
  }
  const LoggedEvent* completed_at = nullptr;
  if (supervisor_fault) {
    for (const LoggedEvent& event : events) {
      if (const auto* recovery = as<events::RecoveryCompleted>(event); recovery && recovery->kind == events::FailureKind::supervisor_lost) {
        completed_at = &event;
        break;
      }
    }
  } else if (detected) {
    completed_at = first_of<events::RecoveryCompleted>(events, index_of(events, detected));
  }
  const events::RecoveryCompleted* completed = completed_at ? as<events::RecoveryCompleted>(*completed_at) : nullptr;
  bool was_detected = detected != nullptr || (supervisor_fault && verdict.detected_wall_ms);
  if (was_detected && completed) {
    verdict.recovered_wall_ms = completed_at->wall_ms();
    if (verdict.recovered_wall_ms) verdict.recover_ms = std::max<int64_t>(0, *verdict.recovered_wall_ms - injection.wall_ms);
    if (completed->phases.is_object()) verdict.phases = completed->phases;
    verdict.resume_step = completed->resume_step;
    verdict.last_step = completed->last_step;
    verdict.steps_lost = completed->steps_lost;
    verdict.action = completed->action;
  }

  grade_duration(verdict, "detect", objectives.detect, verdict.detect_ms, ObjectiveSource::drill_spec);
  grade_duration(verdict, "recover", objectives.recover, verdict.recover_ms, objectives.recover_from);
  grade_lost_steps(verdict, objectives.max_lost_steps, verdict.steps_lost, objectives.lost_from);
  grade_lost_time(verdict, objectives, context);
  grade_mode(verdict, objectives, injection);

  check(verdict, "failure detected", was_detected,
        was_detected ? verdict.detected_kind + " at " + format_timestamp_utc(verdict.detected_wall_ms.value_or(0))
                     : supervisor_fault ? "the agents never fenced" : "no failure.detected after the injection");
  if (detected && injection.fault.rank) {
    bool right = verdict.detected_rank == injection.fault.rank;
    check(verdict, "blamed the faulted rank", right,
          "blamed rank " + (verdict.detected_rank ? std::to_string(*verdict.detected_rank) : std::string("none")) +
              ", faulted rank " + std::to_string(*injection.fault.rank));
  }
  check(verdict, "recovery completed", completed != nullptr && was_detected,
        completed ? "first step of the new generation at " + format_timestamp_utc(verdict.recovered_wall_ms.value_or(0))
                  : supervisor_fault ? "no recovery.completed {kind: supervisor.lost} after the injection"
                                     : "no recovery.completed after the failure");
  if (is_host_fault(injection.fault.kind)) grade_host_loss(verdict, injection, events);
  bool in_place = completed && completed->action == "in-place";
  if (supervisor_fault) {
    // No supervisor is left to confirm releases: the drill's fence check stands for it.
    verdict.resources_released = verdict.detected_wall_ms.has_value();
  } else if (in_place) {
    grade_carry_over(verdict, injection, events);
  } else {
    grade_release(verdict, injection, events);
  }
  // In place, the carried-over survivors live on by design; anything else of the hit
  // generation must be gone.
  std::vector<int> carried = in_place ? carried_over_pids(events, injection.generation) : std::vector<int>{};
  std::vector<int> left;
  for (int pid : context.surviving_pids) {
    if (std::find(carried.begin(), carried.end(), pid) == carried.end()) left.push_back(pid);
  }
  check(verdict, "old processes gone", left.empty(),
        left.empty() ? "every pid of generation " + std::to_string(injection.generation) + " is gone" +
                           (carried.empty() ? "" : " but the " + std::to_string(carried.size()) + " carried over in place")
                     : std::to_string(left.size()) + " still alive, e.g. pid " + std::to_string(left.front()));

  if (injection.fault.kind == FaultKind::corrupt_checkpoint && injection.corrupted_step) {
    int64_t bad = *injection.corrupted_step;
    bool rejected = false;
    for (const LoggedEvent& event : events) {
      // `bad` is the oldest step damaged; newer ones may be damaged too (the drill damages every
      // step the restart could be told to load), and the one the supervisor names is refused.
      if (const auto* refused = as<events::CheckpointRejected>(event); refused && refused->step >= bad) rejected = true;
    }
    check(verdict, "corrupt checkpoint rejected", rejected,
          rejected ? "step " + std::to_string(bad) + " (or a newer damaged one) refused by its checksum"
                   : "no checkpoint.rejected for step " + std::to_string(bad) + " or newer");
    bool older = verdict.resume_step && *verdict.resume_step < bad;
    check(verdict, "resumed from the previous good checkpoint", older,
          verdict.resume_step ? "resumed from step " + std::to_string(*verdict.resume_step) + " (corrupted: step " +
                                    std::to_string(bad) + ")"
                              : "never resumed");
  }
  grade_health_gate(verdict, events);
  for (const CheckResult& extra : context.extra_checks) verdict.checks.push_back(extra);
  grade_final_state(verdict, context);
}

// slow-storage: nothing should fail. Checkpoints must still commit (and take at least the
// injected delay, which proves the hook was live), and training must go on to the end.
void grade_slow_storage(FaultVerdict& verdict, const Injection& injection, const Events& events,
                        const Objectives& objectives, const GradeContext& context) {
  int commits = 0;
  int slow = 0;
  int64_t newest = -1;
  int64_t lost = 0;
  for (const LoggedEvent& event : events) {
    if (const auto* committed = as<events::CheckpointCommitted>(event)) {
      ++commits;
      newest = std::max(newest, committed->step);
      if (committed->seconds * 1000 >= 0.9 * static_cast<double>(injection.fault.delay.count())) ++slow;
    } else if (const auto* recovery = as<events::RecoveryCompleted>(event)) {
      lost += recovery->steps_lost;
    }
  }
  // A failure after another fault's drill.injected belongs to that fault, not to the storage.
  const LoggedEvent* detected = nullptr;
  for (const LoggedEvent& event : events) {
    if (as<events::DrillInjected>(event)) break;
    if (as<events::FailureDetected>(event)) {
      detected = &event;
      break;
    }
  }
  if (detected) take_detection(verdict, *detected);
  verdict.steps_lost = lost;
  verdict.last_step = newest;
  grade_lost_steps(verdict, objectives.max_lost_steps, verdict.steps_lost, objectives.lost_from);
  grade_lost_time(verdict, objectives, context);
  check(verdict, "checkpoints committed", commits > 0,
        std::to_string(commits) + " committed, newest step " + std::to_string(newest));
  check(verdict, "delay took effect", slow > 0,
        std::to_string(slow) + " of " + std::to_string(commits) + " commits took at least " +
            format_duration(injection.fault.delay));
  check(verdict, "no failure detected", detected == nullptr,
        detected ? "slow storage was taken for a failure: " + verdict.detected_kind : "none");
  grade_final_state(verdict, context);
}

}  // namespace

std::vector<int> carried_over_pids(const std::vector<LoggedEvent>& events, int from_gen) {
  std::vector<int> pids;
  for (const LoggedEvent& event : events) {
    const auto* carried = as<events::RecoveryCarriedOver>(event);
    if (!carried || event.gen.value_or(-1) != from_gen + 1) continue;
    for (int64_t pid : carried->pids) {
      if (pid >= INT_MIN && pid <= INT_MAX) pids.push_back(static_cast<int>(pid));
    }
  }
  return pids;
}

const char* to_string(ObjectiveSource source) {
  return source == ObjectiveSource::intent ? "the job's intent" : "the drill spec";
}

bool FaultVerdict::passed() const {
  for (const ObjectiveResult& objective : objectives) {
    if (!objective.met) return false;
  }
  for (const CheckResult& result : checks) {
    if (!result.met) return false;
  }
  return true;
}

std::vector<std::string> FaultVerdict::missed() const {
  std::vector<std::string> out;
  for (const ObjectiveResult& objective : objectives) {
    if (!objective.met) {
      out.push_back(objective.name + " (limit " + objective.limit + " from " + to_string(objective.source) + ", measured " +
                    objective.measured + ")");
    }
  }
  for (const CheckResult& result : checks) {
    if (!result.met) out.push_back(result.name + " (" + result.detail + ")");
  }
  return out;
}

FaultVerdict grade_fault(const Injection& injection, const std::vector<LoggedEvent>& events_after,
                         const Objectives& objectives, const GradeContext& context) {
  FaultVerdict verdict;
  verdict.injection = injection;
  if (injection.fault.kind == FaultKind::slow_storage) {
    grade_slow_storage(verdict, injection, events_after, objectives, context);
  } else {
    grade_recovery(verdict, injection, events_after, objectives, context);
  }
  return verdict;
}

json to_json(const FaultVerdict& verdict) {
  const Injection& injection = verdict.injection;
  auto optional = [](const auto& value) { return value ? json(*value) : json(nullptr); };
  json out = {{"fault", to_string(injection.fault.kind)},
              {"target", injection.fault.target},
              {"pid", injection.pid},
              {"at_step", injection.at_step},
              {"generation", injection.generation},
              {"injected_at", format_timestamp_utc(injection.wall_ms)},
              {"detected_at", verdict.detected_wall_ms ? json(format_timestamp_utc(*verdict.detected_wall_ms)) : json(nullptr)},
              {"detected_by", verdict.detected_kind.empty() ? json(nullptr) : json(verdict.detected_kind)},
              {"detected_rank", optional(verdict.detected_rank)},
              {"detect_ms", optional(verdict.detect_ms)},
              {"recovered_at", verdict.recovered_wall_ms ? json(format_timestamp_utc(*verdict.recovered_wall_ms)) : json(nullptr)},
              {"recover_ms", optional(verdict.recover_ms)},
              {"phases", verdict.phases},
              {"resume_step", optional(verdict.resume_step)},
              {"last_step", optional(verdict.last_step)},
              {"steps_lost", optional(verdict.steps_lost)},
              {"lost_ms", optional(verdict.lost_ms)},
              {"action", verdict.action.empty() ? json(nullptr) : json(verdict.action)},
              {"resources_released", optional(verdict.resources_released)},
              {"final_state", verdict.final_state},
              {"verdict", verdict.passed() ? "pass" : "fail"}};
  if (injection.fault.kind == FaultKind::slow_storage) out["delay_ms"] = injection.fault.delay.count();
  if (injection.corrupted_step) {
    out["corrupted_step"] = *injection.corrupted_step;
    out["corrupted_file"] = injection.corrupted_file;
  }
  json objectives = json::array();
  for (const ObjectiveResult& objective : verdict.objectives) {
    objectives.push_back({{"name", objective.name}, {"limit", objective.limit}, {"measured", objective.measured},
                          {"met", objective.met}, {"from", to_string(objective.source)}});
  }
  json checks = json::array();
  for (const CheckResult& result : verdict.checks) {
    checks.push_back({{"name", result.name}, {"met", result.met}, {"detail", result.detail}});
  }
  out["objectives"] = objectives;
  out["checks"] = checks;
  return out;
}

}  // namespace dtrain::drill
