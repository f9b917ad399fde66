// to_json and from_json of the generations', workers' and GPUs' events (events.h).

#include "launcher/events/events.h"

#include "launcher/base/duration.h"
#include "launcher/events/event_fields.h"

namespace dtrain::events {

using nlohmann::json;
using detail::EventFields;
using detail::named;
using detail::put_if;

namespace {

json straggler_score(const char* name, const StragglerScore& event) {
  return named(name, {{"gen", event.gen}, {"host", event.host}, {"rank", event.rank}, {"score", event.score},
                      {"median_step_ms", event.median_step_ms}, {"fastest_median_ms", event.fastest_median_ms}});
}

}  // namespace

// ---- generations and workers

json PlanGeneration::to_json() const {
  return named(name, {{"gen", gen}, {"world_size", world_size}, {"data", data}, {"tensor", tensor},
                      {"pipeline", pipeline}, {"grad_accum", grad_accum}, {"resume_step", resume_step},
                      {"hosts", hosts}});
}

Result<PlanGeneration> PlanGeneration::from_json(const json& object) {
  EventFields fields(name, object);
  PlanGeneration event;
  fields.read("gen", event.gen).read("world_size", event.world_size).read("data", event.data)
      .read("tensor", event.tensor).read("pipeline", event.pipeline).read("grad_accum", event.grad_accum)
      .read("resume_step", event.resume_step).read("hosts", event.hosts);
  return fields.result(std::move(event));
}

json PlanChanged::to_json() const { return named(name, {{"diff", diff}, {"without", without}}); }

Result<PlanChanged> PlanChanged::from_json(const json& object) {
  EventFields fields(name, object);
  PlanChanged event;
  fields.read("diff", event.diff).read("without", event.without);
  return fields.result(std::move(event));
}

json GenerationSpawned::to_json() const {
  return named(name, {{"gen", gen}, {"master_addr", master_addr}, {"master_port", master_port}, {"backend", backend},
                      {"resume_step", resume_step}, {"checkpoint_dir", checkpoint_dir}});
}

Result<GenerationSpawned> GenerationSpawned::from_json(const json& object) {
  EventFields fields(name, object);
  GenerationSpawned event;
  fields.read("gen", event.gen).read("master_addr", event.master_addr).read("master_port", event.master_port)
      .read("backend", event.backend).read("resume_step", event.resume_step)
      .read("checkpoint_dir", event.checkpoint_dir);
  return fields.result(std::move(event));
}

json GenerationStepped::to_json() const {
  return named(name, {{"gen", gen}, {"step", step}, {"ms_since_spawn", ms_since_spawn}});
}

Result<GenerationStepped> GenerationStepped::from_json(const json& object) {
  EventFields fields(name, object);
  GenerationStepped event;
  fields.read("gen", event.gen).read("step", event.step).read("ms_since_spawn", event.ms_since_spawn);
  return fields.result(std::move(event));
}

json WorkerStarted::to_json() const {
  return named(name, {{"rank", rank}, {"host", host}, {"local_rank", local_rank}, {"pid", pid}});
}

Result<WorkerStarted> WorkerStarted::from_json(const json& object) {
  EventFields fields(name, object);
  WorkerStarted event;
  fields.read("rank", event.rank).read("host", event.host).read("local_rank", event.local_rank)
      .read("pid", event.pid);
  return fields.result(std::move(event));
}

json WorkerSpawnFailed::to_json() const { return named(name, {{"rank", rank}, {"host", host}, {"error", error}}); }

Result<WorkerSpawnFailed> WorkerSpawnFailed::from_json(const json& object) {
  EventFields fields(name, object);
  WorkerSpawnFailed event;
  fields.read("rank", event.rank).read("host", event.host).read("error", event.error);
  return fields.result(std::move(event));
}

json WorkerError::to_json() const {
  json out = {{"message", message}};
  put_if(out, "type", type);
  put_if(out, "traceback", traceback);
  put_if(out, "timestamp", timestamp);
  return out;
}

Result<WorkerError> WorkerError::from_json(const json& object) {
  EventFields fields("error", object);
  WorkerError event;
  fields.read("message", event.message).read("type", event.type).read("traceback", event.traceback)
      .read("timestamp", event.timestamp);
  return fields.result(std::move(event));
}

json WorkerExit::to_json() const {
  json out = named(name, {{"gen", gen}, {"rank", rank}, {"host", host}, {"pid", pid}});
  put_if(out, "local_rank", local_rank);
  put_if(out, "code", code);
  put_if(out, "signal", signal);
  out["log"] = log;
  out["tail"] = tail;
  if (error) out["error"] = error->to_json();
  return out;
}

Result<WorkerExit> WorkerExit::from_json(const json& object) {
  EventFields fields(name, object);
  WorkerExit event;
  fields.read("gen", event.gen).read("rank", event.rank).read("host", event.host).read("pid", event.pid)
      .read("local_rank", event.local_rank).read("code", event.code).read("signal", event.signal)
      .read("log", event.log).read("tail", event.tail);
  fields.read_nested("error", event.error);
  return fields.result(std::move(event));
}

json WorkerHang::to_json() const {
  return named(name, {{"rank", rank}, {"host", host}, {"pid", pid}, {"step", step}, {"phase", phase},
                      {"silent_ms", silent_ms}, {"limit_ms", limit_ms}});
}

Result<WorkerHang> WorkerHang::from_json(const json& object) {
  EventFields fields(name, object);
  WorkerHang event;
  fields.read("rank", event.rank).read("host", event.host).read("pid", event.pid).read("step", event.step)
      .read("phase", event.phase).read("silent_ms", event.silent_ms).read("limit_ms", event.limit_ms);
  return fields.result(std::move(event));
}

json WorkerSample::to_json() const {
  json out = named(name, {{"rank", rank}, {"host", host}, {"pid", pid}});
  put_if(out, "error", error);
  put_if(out, "path", path);
  put_if(out, "bytes", bytes);
  return out;
}

Result<WorkerSample> WorkerSample::from_json(const json& object) {
  EventFields fields(name, object);
  WorkerSample event;
  fields.read("rank", event.rank).read("host", event.host).read("pid", event.pid).read("error", event.error)
      .read("path", event.path).read("bytes", event.bytes);
  return fields.result(std::move(event));
}

json CommReady::to_json() const { return named(name, {{"ranks", ranks}, {"ms_since_spawn", ms_since_spawn}}); }

Result<CommReady> CommReady::from_json(const json& object) {
  EventFields fields(name, object);
  CommReady event;
  fields.read("ranks", event.ranks).read("ms_since_spawn", event.ms_since_spawn);
  return fields.result(std::move(event));
}

json CommWarn::to_json() const {
  json out = named(name, {{"gen", gen}, {"rank", rank}, {"host", host}, {"line", line}});
  if (repeated > 0) {
    out["repeated"] = repeated;
    out["window_s"] = window_s;
    out["detail"] = detail;
  }
  return out;
}

Result<CommWarn> CommWarn::from_json(const json& object) {
  EventFields fields(name, object);
  CommWarn event;
  fields.read("gen", event.gen).read("rank", event.rank).read("host", event.host).read("line", event.line)
      .read("repeated", event.repeated).read("window_s", event.window_s).read("detail", event.detail);
  if (event.repeated <= 0) event = CommWarn{event.gen, event.rank, event.host, event.line};  // the first line alone
  return fields.result(std::move(event));
}

json HangDump::to_json() const {
  json out = named(name, {{"gen", gen}, {"rank", rank}, {"host", host}, {"pid", pid}, {"dump_bytes", dump_bytes}});
  put_if(out, "error", error);
  put_if(out, "kept_path", kept_path);
  put_if(out, "detail", detail);
  put_if(out, "path", path);
  put_if(out, "bytes", bytes);
  return out;
}

Result<HangDump> HangDump::from_json(const json& object) {
  EventFields fields(name, object);
  HangDump event;
  fields.read("gen", event.gen).read("rank", event.rank).read("host", event.host).read("pid", event.pid)
      .read("dump_bytes", event.dump_bytes).read("error", event.error).read("kept_path", event.kept_path)
      .read("detail", event.detail).read("path", event.path).read("bytes", event.bytes);
  return fields.result(std::move(event));
}

json HangDetectionOff::to_json() const { return named(name, {{"ranks", ranks}, {"detail", detail}}); }

Result<HangDetectionOff> HangDetectionOff::from_json(const json& object) {
  EventFields fields(name, object);
  HangDetectionOff event;
  fields.read("ranks", event.ranks).read("detail", event.detail);
  return fields.result(std::move(event));
}

json HangDetectionOn::to_json() const {
  return named(name, {{"ranks", ranks}, {"after_ms", after_ms}, {"detail", detail}});
}

Result<HangDetectionOn> HangDetectionOn::from_json(const json& object) {
  EventFields fields(name, object);
  HangDetectionOn event;
  fields.read("ranks", event.ranks).read("after_ms", event.after_ms).read("detail", event.detail);
  return fields.result(std::move(event));
}

std::string HangTimeoutChanged::text() const {
  std::string out = format_duration(Millis(hang_timeout_ms));
  if (basis == kSpec) return out + " (heartbeat.hang_timeout)";
  out += " auto (";
  if (basis == kWarmUp) {
    out += "warm-up";
    if (longest_step_ms) out += "; longest step so far " + format_duration(Millis(*longest_step_ms));
  } else {
    std::string step = longest_step_ms ? format_duration(Millis(*longest_step_ms)) : "?";
    out += basis == kFloor ? "floor; " + std::to_string(factor) + " x longest step " + step + " is less"
                           : std::to_string(factor) + " x longest step " + step;
  }
  return out + "); checkpoint save " + format_duration(Millis(checkpoint_timeout_ms)) + ", progress window " +
         format_duration(Millis(progress_window_ms));
}

json HangTimeoutChanged::to_json() const {
  json out = named(name, {{"gen", gen}, {"hang_timeout_ms", hang_timeout_ms},
                          {"checkpoint_timeout_ms", checkpoint_timeout_ms}, {"progress_window_ms", progress_window_ms},
                          {"basis", basis}, {"factor", factor}});
  put_if(out, "longest_step_ms", longest_step_ms);
  put_if(out, "longest_save_ms", longest_save_ms);
  return out;
}

Result<HangTimeoutChanged> HangTimeoutChanged::from_json(const json& object) {
  EventFields fields(name, object);
  HangTimeoutChanged event;
  fields.read("gen", event.gen).read("hang_timeout_ms", event.hang_timeout_ms)
      .read("checkpoint_timeout_ms", event.checkpoint_timeout_ms).read("progress_window_ms", event.progress_window_ms)
      .read("basis", event.basis).read("factor", event.factor).read("longest_step_ms", event.longest_step_ms)
      .read("longest_save_ms", event.longest_save_ms);
  return fields.result(std::move(event));
}

json StragglerDetected::to_json() const { return straggler_score(name, *this); }

Result<StragglerDetected> StragglerDetected::from_json(const json& object) {
  EventFields fields(name, object);
  StragglerDetected event;
  fields.read("gen", event.gen).read("host", event.host).read("rank", event.rank).read("score", event.score)
      .read("median_step_ms", event.median_step_ms).read("fastest_median_ms", event.fastest_median_ms);
  return fields.result(std::move(event));
}

json StragglerCleared::to_json() const { return straggler_score(name, *this); }

Result<StragglerCleared> StragglerCleared::from_json(const json& object) {
  EventFields fields(name, object);
  StragglerCleared event;
  fields.read("gen", event.gen).read("host", event.host).read("rank", event.rank).read("score", event.score)
      .read("median_step_ms", event.median_step_ms).read("fastest_median_ms", event.fastest_median_ms);
  return fields.result(std::move(event));
}

// ---- GPUs

json GpuXid::to_json() const { return named(name, {{"host", host}, {"gpu", gpu}, {"xid", xid}}); }

Result<GpuXid> GpuXid::from_json(const json& object) {
  EventFields fields(name, object);
  GpuXid event;
  fields.read("host", event.host).read("gpu", event.gpu).read("xid", event.xid);
  return fields.result(std::move(event));
}

json GpuEccErrors::to_json() const {
  return named(name, {{"host", host}, {"gpu", gpu}, {"uncorrected", uncorrected}, {"previous", previous}});
}

Result<GpuEccErrors> GpuEccErrors::from_json(const json& object) {
  EventFields fields(name, object);
  GpuEccErrors event;
  fields.read("host", event.host).read("gpu", event.gpu).read("uncorrected", event.uncorrected)
      .read("previous", event.previous);
  return fields.result(std::move(event));
}

}  // namespace dtrain::events
