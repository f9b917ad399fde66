// to_json and from_json of the failures', recoveries', checkpoints' and drills' events (events.h).

#include "launcher/events/events.h"

#include "launcher/events/event_fields.h"

namespace dtrain::events {

using nlohmann::json;
using detail::EventFields;
using detail::named;
using detail::put_if;

// ---- failures and recoveries

json FailureCause::to_json() const {
  json out = {{"kind", to_string(kind)}, {"host", host}, {"detail", detail}};
  if (rank) {
    out["rank"] = *rank;
    out["local_rank"] = local_rank;
  }
  put_if(out, "pid", pid);
  put_if(out, "code", code);
  put_if(out, "signal", signal);
  put_if(out, "traceback", traceback);
  return out;
}

Result<FailureCause> FailureCause::from_json(const json& object) {
  EventFields fields("cause", object);
  FailureCause event;
  fields.read("kind", event.kind).read("host", event.host).read("detail", event.detail).read("rank", event.rank)
      .read("local_rank", event.local_rank).read("pid", event.pid).read("code", event.code)
      .read("signal", event.signal).read("traceback", event.traceback);
  if (!event.rank) event.local_rank = -1;  // written with rank only
  return fields.result(std::move(event));
}

json FailureDetected::to_json() const {
  json out = named(name, cause.to_json());
  put_if(out, "latency_ms", latency_ms);
  put_if(out, "detected_by", detected_by);
  return out;
}

Result<FailureDetected> FailureDetected::from_json(const json& object) {
  EventFields fields(name, object);
  FailureDetected event;
  Result<FailureCause> cause = FailureCause::from_json(object);  // its fields sit beside "ev"
  if (!cause) return Error::user(std::string(name) + ": " + cause.error().message);
  event.cause = std::move(*cause);
  fields.read("latency_ms", event.latency_ms).read("detected_by", event.detected_by);
  return fields.result(std::move(event));
}

json FailureRootCause::to_json() const { return named(name, {{"rank", rank}, {"host", host}, {"detail", detail}}); }

Result<FailureRootCause> FailureRootCause::from_json(const json& object) {
  EventFields fields(name, object);
  FailureRootCause event;
  fields.read("rank", event.rank).read("host", event.host).read("detail", event.detail);
  return fields.result(std::move(event));
}

json FailureBudgetExhausted::to_json() const {
  return named(name, {{"max_restarts", max_restarts}, {"restart_window_ms", restart_window_ms}, {"detail", detail}});
}

Result<FailureBudgetExhausted> FailureBudgetExhausted::from_json(const json& object) {
  EventFields fields(name, object);
  FailureBudgetExhausted event;
  fields.read("max_restarts", event.max_restarts).read("restart_window_ms", event.restart_window_ms)
      .read("detail", event.detail);
  return fields.result(std::move(event));
}

json FailureCrashLoop::to_json() const { return named(name, {{"generations", generations}, {"detail", detail}}); }

Result<FailureCrashLoop> FailureCrashLoop::from_json(const json& object) {
  EventFields fields(name, object);
  FailureCrashLoop event;
  fields.read("generations", event.generations).read("detail", event.detail);
  return fields.result(std::move(event));
}

json FailureUnrecoverable::to_json() const { return named(name, {{"detail", detail}}); }

Result<FailureUnrecoverable> FailureUnrecoverable::from_json(const json& object) {
  EventFields fields(name, object);
  FailureUnrecoverable event;
  fields.read("detail", event.detail);
  return fields.result(std::move(event));
}

json RecoveryStarted::to_json() const {
  json out = named(name, {{"cause", cause.to_json()}, {"restarts", restarts}, {"action", action}});
  put_if(out, "why", why);
  return out;
}

Result<RecoveryStarted> RecoveryStarted::from_json(const json& object) {
  EventFields fields(name, object);
  RecoveryStarted event;
  fields.read_nested("cause", event.cause);
  fields.read("restarts", event.restarts).read("action", event.action).read("why", event.why);
  return fields.result(std::move(event));
}

json RecoveryCompleted::to_json() const {
  json out = named(name, {{"kind", to_string(kind)}, {"cause", cause.to_json()}, {"phases", phases}, {"resume_step", resume_step},
                      {"last_step", last_step}, {"steps_lost", steps_lost}, {"world_size", world_size},
                      {"restarts", restarts}, {"action", action}});
  put_if(out, "fallback", fallback);
  return out;
}

Result<RecoveryCompleted> RecoveryCompleted::from_json(const json& object) {
  EventFields fields(name, object);
  RecoveryCompleted event;
  fields.read("kind", event.kind);
  fields.read_nested("cause", event.cause);
  fields.read("phases", event.phases).read("resume_step", event.resume_step).read("last_step", event.last_step)
      .read("steps_lost", event.steps_lost).read("world_size", event.world_size).read("restarts", event.restarts)
      .read("action", event.action).read("fallback", event.fallback);
  return fields.result(std::move(event));
}

json RecoveryCarriedOver::to_json() const {
  return named(name, {{"gen", gen}, {"host", host}, {"ranks", ranks}, {"pids", pids}});
}

Result<RecoveryCarriedOver> RecoveryCarriedOver::from_json(const json& object) {
  EventFields fields(name, object);
  RecoveryCarriedOver event;
  fields.read("gen", event.gen).read("host", event.host).read("ranks", event.ranks).read("pids", event.pids);
  return fields.result(std::move(event));
}

json RecoveryFallback::to_json() const { return named(name, {{"gen", gen}, {"detail", detail}}); }

Result<RecoveryFallback> RecoveryFallback::from_json(const json& object) {
  EventFields fields(name, object);
  RecoveryFallback event;
  fields.read("gen", event.gen).read("detail", event.detail);
  return fields.result(std::move(event));
}

json ResourcesReleased::to_json() const {
  return named(name, {{"gen", gen}, {"host", host}, {"killed", killed}, {"remaining", remaining}, {"ms", ms}});
}

Result<ResourcesReleased> ResourcesReleased::from_json(const json& object) {
  EventFields fields(name, object);
  ResourcesReleased event;
  fields.read("gen", event.gen).read("host", event.host).read("killed", event.killed)
      .read("remaining", event.remaining).read("ms", event.ms);
  return fields.result(std::move(event));
}

json ResourcesUnconfirmed::to_json() const { return named(name, {{"hosts", hosts}, {"detail", detail}}); }

Result<ResourcesUnconfirmed> ResourcesUnconfirmed::from_json(const json& object) {
  EventFields fields(name, object);
  ResourcesUnconfirmed event;
  fields.read("hosts", event.hosts).read("detail", event.detail);
  return fields.result(std::move(event));
}

// ---- checkpoints

json CheckpointCommitted::to_json() const {
  json out = named(name, {{"gen", gen}, {"rank", rank}, {"host", host}, {"step", step}, {"bytes", bytes},
                          {"seconds", seconds}});
  put_if(out, "stall_seconds", stall_seconds);
  return out;
}

Result<CheckpointCommitted> CheckpointCommitted::from_json(const json& object) {
  EventFields fields(name, object);
  CheckpointCommitted event;
  fields.read("gen", event.gen).read("rank", event.rank).read("host", event.host).read("step", event.step)
      .read("bytes", event.bytes).read("seconds", event.seconds).read("stall_seconds", event.stall_seconds);
  return fields.result(std::move(event));
}

json CheckpointRejected::to_json() const {
  return named(name, {{"gen", gen}, {"rank", rank}, {"host", host}, {"step", step}, {"reason", reason}});
}

Result<CheckpointRejected> CheckpointRejected::from_json(const json& object) {
  EventFields fields(name, object);
  CheckpointRejected event;
  fields.read("gen", event.gen).read("rank", event.rank).read("host", event.host).read("step", event.step)
      .read("reason", event.reason);
  return fields.result(std::move(event));
}

json CheckpointRequested::to_json() const {
  return named(name, {{"gen", gen}, {"reason", reason}, {"step", step}, {"ranks", ranks}});
}

Result<CheckpointRequested> CheckpointRequested::from_json(const json& object) {
  EventFields fields(name, object);
  CheckpointRequested event;
  fields.read("gen", event.gen).read("reason", event.reason).read("step", event.step).read("ranks", event.ranks);
  return fields.result(std::move(event));
}

// ---- drills

json DrillInjected::to_json() const {
  json out = named(name, {{"fault", fault}, {"target", target}, {"pid", pid}, {"at_step", at_step}, {"gen", gen}});
  if (corrupted_step) {
    out["corrupted_step"] = *corrupted_step;
    out["corrupted_file"] = corrupted_file;
  }
  put_if(out, "workers", workers);
  put_if(out, "method", method);
  put_if(out, "detail", detail);
  put_if(out, "duration_ms", duration_ms);
  return out;
}

Result<DrillInjected> DrillInjected::from_json(const json& object) {
  EventFields fields(name, object);
  DrillInjected event;
  fields.read("fault", event.fault).read("target", event.target).read("pid", event.pid)
      .read("at_step", event.at_step).read("gen", event.gen).read("corrupted_step", event.corrupted_step)
      .read("corrupted_file", event.corrupted_file).read("workers", event.workers).read("method", event.method)
      .read("detail", event.detail).read("duration_ms", event.duration_ms);
  if (!event.corrupted_step) event.corrupted_file.clear();  // written with corrupted_step only
  return fields.result(std::move(event));
}

json DrillCorrupted::to_json() const { return named(name, {{"step", step}, {"file", file}, {"why", why}}); }

Result<DrillCorrupted> DrillCorrupted::from_json(const json& object) {
  EventFields fields(name, object);
  DrillCorrupted event;
  fields.read("step", event.step).read("file", event.file).read("why", event.why);
  return fields.result(std::move(event));
}

json DrillVerdict::to_json() const { return named(name, report); }

Result<DrillVerdict> DrillVerdict::from_json(const json& object) {
  EventFields fields(name, object);
  DrillVerdict event;
  if (object.is_object()) {
    event.report = object;
    event.report.erase("ev");
    event.report.erase("ts");
  }
  return fields.result(std::move(event));
}

}  // namespace dtrain::events
