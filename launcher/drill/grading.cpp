#include "launcher/drill/grading.h"

#include <algorithm>
#include <set>

#include "launcher/runlog/event_log.h"
#include "launcher/base/clock.h"
#include "launcher/base/json_fields.h"
#include "launcher/events/event_catalogue.h"

namespace dtrain::drill {

using nlohmann::json;

namespace {

std::string name_of(const json& event) { return json_string(event, "ev"); }

const json* first_named(const std::vector<json>& events, const std::string& name, size_t from = 0) {
  for (size_t i = from; i < events.size(); ++i) {
    if (name_of(events[i]) == name) return &events[i];
  }
  return nullptr;
}

size_t index_of(const std::vector<json>& events, const json* event) {
  return event ? static_cast<size_t>(event - events.data()) : events.size();
}

void grade_duration(FaultVerdict& verdict, const char* name, const std::optional<Millis>& limit,
                    const std::optional<int64_t>& measured) {
  if (!limit) return;
  ObjectiveResult result;
  result.name = name;
  result.limit = format_duration(*limit);
  result.measured = measured ? format_duration(Millis(*measured)) : "never";
  result.met = measured && *measured <= limit->count();
  verdict.objectives.push_back(result);
}

void grade_lost_steps(FaultVerdict& verdict, const std::optional<int64_t>& limit, const std::optional<int64_t>& lost) {
  if (!limit) return;
  verdict.objectives.push_back({"max_lost_steps", std::to_string(*limit), lost ? std::to_string(*lost) : "never",
                                lost && *lost <= *limit});
}

void check(FaultVerdict& verdict, std::string name, bool met, std::string detail) {
  verdict.checks.push_back({std::move(name), met, std::move(detail)});
}

bool is_host_fault(FaultKind kind) { return kind == FaultKind::kill_host || kind == FaultKind::partition_host; }

const json* next_plan_after(const std::vector<json>& events, int generation) {
  for (const json& event : events) {
    if (name_of(event) == events::kPlanGeneration && json_int(event, "gen").value_or(-1) > generation) return &event;
  }
  return nullptr;
}

// A host fault must be seen as the host's loss, and the next generation must run without it
// (shrunk over the others, or with a spare in its place).
void grade_host_loss(FaultVerdict& verdict, const Injection& injection, const std::vector<json>& events) {
  const std::string& host = injection.fault.target;
  const json* lost = nullptr;
  for (const json& event : events) {
    if (name_of(event) == events::kHostLost && json_string(event, "host") == host) {
      lost = &event;
      break;
    }
  }
  check(verdict, "host lost", lost != nullptr,
        lost ? host + ": " + json_string(*lost, "reason", "lost") +
                   (json_int(*lost, "silent_ms") ? " (silent " + std::to_string(*json_int(*lost, "silent_ms")) + "ms)" : "")
             : "no host.lost for " + host + " after the injection");
  const json* plan = next_plan_after(events, injection.generation);
  bool without = false;
  std::string detail = "no next generation was planned";
  if (plan) {
    std::vector<std::string> hosts;
    if (const json* list = json_member(*plan, "hosts"); list && list->is_array()) {
      for (const json& name : *list) {
        if (name.is_string()) hosts.push_back(name.get<std::string>());
      }
    }
    without = std::find(hosts.begin(), hosts.end(), host) == hosts.end();
    std::string joined;
    for (const std::string& name : hosts) joined += (joined.empty() ? "" : ", ") + name;
    detail = "generation " + std::to_string(json_int(*plan, "gen").value_or(-1)) + " runs " +
             std::to_string(json_int(*plan, "world_size").value_or(-1)) + " rank(s) on " + joined +
             (without ? "" : " (still including " + host + ")");
  }
  check(verdict, "host left out of the new generation", without, detail);
}

// In place, the hit generation is not stopped: every host that still has its workers must have
// carried them over (recovery.carried_over), and the faulted process must not be among them.
void grade_carry_over(FaultVerdict& verdict, const Injection& injection, const std::vector<json>& events) {
  std::set<std::string> carried_hosts;
  for (const json& event : events) {
    if (name_of(event) == events::kRecoveryCarriedOver && json_int(event, "gen").value_or(-1) == injection.generation + 1) {
      carried_hosts.insert(json_string(event, "host"));
    }
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
void grade_release(FaultVerdict& verdict, const Injection& injection, const std::vector<json>& events) {
  const json* next_plan = nullptr;
  for (const json& event : events) {
    if (name_of(event) == events::kPlanGeneration && json_int(event, "gen").value_or(-1) > injection.generation) {
      next_plan = &event;
      break;
    }
  }
  std::set<std::string> released;
  std::vector<std::string> unclean;
  for (size_t i = 0; i < index_of(events, next_plan); ++i) {
    const json& event = events[i];
    if (name_of(event) != events::kResourcesReleased || json_int(event, "gen").value_or(-2) != injection.generation) continue;
    if (json_int(event, "remaining").value_or(1) == 0) {
      released.insert(json_string(event, "host"));
    } else {
      unclean.push_back(json_string(event, "host") + " (" + std::to_string(json_int(event, "remaining").value_or(-1)) +
                        " left)");
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
             std::to_string(json_int(*next_plan, "gen").value_or(-1)) + " was planned";
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

void grade_recovery(FaultVerdict& verdict, const Injection& injection, const std::vector<json>& events,
                    const Objectives& objectives, const GradeContext& context) {
  // kill-supervisor: the supervisor that would log failure.detected is dead; the drill's own
  // observation (every agent fenced) is the detection, and the resumed supervisor's
  // recovery.completed {kind: supervisor.lost} the recovery.
  bool supervisor_fault = injection.fault.kind == FaultKind::kill_supervisor;
  const json* detected = supervisor_fault ? nullptr : first_named(events, events::kFailureDetected);
  if (supervisor_fault && context.detected_wall_ms) {
    verdict.detected_wall_ms = context.detected_wall_ms;
    verdict.detect_ms = std::max<int64_t>(0, *context.detected_wall_ms - injection.wall_ms);
    verdict.detected_kind = context.detected_by;
  }
  if (detected) {
    verdict.detected_wall_ms = event_wall_ms(*detected);
    if (verdict.detected_wall_ms) verdict.detect_ms = std::max<int64_t>(0, *verdict.detected_wall_ms - injection.wall_ms);
    verdict.detected_kind = json_string(*detected, "kind");
    if (auto rank = json_int(*detected, "rank")) verdict.detected_rank = static_cast<int>(*rank);
  }
  const json* completed = nullptr;
  if (supervisor_fault) {
    for (const json& event : events) {
      if (name_of(event) == events::kRecoveryCompleted && json_string(event, "kind") == "supervisor.lost") {
        completed = &event;
        break;
      }
    }
  } else if (detected) {
    completed = first_named(events, events::kRecoveryCompleted, index_of(events, detected));
  }
  bool was_detected = detected != nullptr || (supervisor_fault && verdict.detected_wall_ms);
  if (was_detected && completed) {
    verdict.recovered_wall_ms = event_wall_ms(*completed);
    if (verdict.recovered_wall_ms) verdict.recover_ms = std::max<int64_t>(0, *verdict.recovered_wall_ms - injection.wall_ms);
    if (const json* phases = json_member(*completed, "phases"); phases && phases->is_object()) verdict.phases = *phases;
    verdict.resume_step = json_int(*completed, "resume_step");
    verdict.last_step = json_int(*completed, "last_step");
    verdict.steps_lost = json_int(*completed, "steps_lost");
  }

  grade_duration(verdict, "detect", objectives.detect, verdict.detect_ms);
  grade_duration(verdict, "recover", objectives.recover, verdict.recover_ms);
  grade_lost_steps(verdict, objectives.max_lost_steps, verdict.steps_lost);

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
  bool in_place = completed && json_string(*completed, "action") == "in-place";
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
    for (const json& event : events) {
      // `bad` is the oldest step damaged; newer ones may be damaged too (the drill damages every
      // step the restart could be told to load), and the one the supervisor names is refused.
      if (name_of(event) == events::kCheckpointRejected && json_int(event, "step").value_or(-1) >= bad) {
        rejected = true;
      }
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
  for (const CheckResult& extra : context.extra_checks) verdict.checks.push_back(extra);
  grade_final_state(verdict, context);
}

// slow-storage: nothing should fail. Checkpoints must still commit (and take at least the
// injected delay, which proves the hook was live), and training must go on to the end.
void grade_slow_storage(FaultVerdict& verdict, const Injection& injection, const std::vector<json>& events,
                        const Objectives& objectives, const GradeContext& context) {
  int commits = 0;
  int slow = 0;
  int64_t newest = -1;
  int64_t lost = 0;
  for (const json& event : events) {
    std::string name = name_of(event);
    if (name == events::kCheckpointCommitted) {
      ++commits;
      newest = std::max(newest, json_int(event, "step").value_or(-1));
      if (json_number(event, "seconds").value_or(0) * 1000 >= 0.9 * static_cast<double>(injection.fault.delay.count())) ++slow;
    } else if (name == events::kRecoveryCompleted) {
      lost += json_int(event, "steps_lost").value_or(0);
    }
  }
  // A failure after another fault's drill.injected belongs to that fault, not to the storage.
  const json* detected = nullptr;
  for (const json& event : events) {
    if (name_of(event) == events::kDrillInjected) break;
    if (name_of(event) == events::kFailureDetected) {
      detected = &event;
      break;
    }
  }
  if (detected) {
    verdict.detected_wall_ms = event_wall_ms(*detected);
    verdict.detected_kind = json_string(*detected, "kind");
    if (auto rank = json_int(*detected, "rank")) verdict.detected_rank = static_cast<int>(*rank);
  }
  verdict.steps_lost = lost;
  verdict.last_step = newest;
  grade_lost_steps(verdict, objectives.max_lost_steps, verdict.steps_lost);
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

std::vector<int> carried_over_pids(const std::vector<json>& events, int from_gen) {
  std::vector<int> pids;
  for (const json& event : events) {
    if (name_of(event) != events::kRecoveryCarriedOver || json_int(event, "gen").value_or(-1) != from_gen + 1) continue;
    if (const json* list = json_member(event, "pids"); list && list->is_array()) {
      for (const json& pid : *list) {
        if (pid.is_number_integer()) pids.push_back(pid.get<int>());
      }
    }
  }
  return pids;
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
    if (!objective.met) out.push_back(objective.name + " (limit " + objective.limit + ", measured " + objective.measured + ")");
  }
  for (const CheckResult& result : checks) {
    if (!result.met) out.push_back(result.name + " (" + result.detail + ")");
  }
  return out;
}

FaultVerdict grade_fault(const Injection& injection, const std::vector<json>& events_after,
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
                          {"met", objective.met}});
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
