#include "launcher/events/events.h"

namespace dtrain::events {

using nlohmann::json;

namespace {

/// An event: its name and its fields. "ts" is the log's to add.
json named(const char* name, json fields = json::object()) {
  fields["ev"] = name;
  return fields;
}

template <class T>
void put_if(json& event, const char* key, const std::optional<T>& value) {
  if (value) event[key] = *value;
}

json host_failure_count(const char* name, const HostFailureCount& event) {
  return named(name, {{"host", event.host}, {"failures", event.failures}, {"detail", event.detail}});
}

json straggler_score(const char* name, const StragglerScore& event) {
  return named(name, {{"gen", event.gen}, {"host", event.host}, {"rank", event.rank}, {"score", event.score},
                      {"median_step_ms", event.median_step_ms}, {"fastest_median_ms", event.fastest_median_ms}});
}

}  // namespace

// ---- the run

json RunSubmitted::to_json() const {
  return named(name, {{"run_id", run_id}, {"name", run_name}, {"tenant", tenant}, {"user", user}, {"spec", spec},
                      {"hosts", hosts}, {"world_size", world_size}, {"dtrain_version", dtrain_version},
                      {"supervisor_pid", supervisor_pid}, {"supervisor_host", supervisor_host},
                      {"detached", detached}});
}

json RunResumed::to_json() const {
  return named(name, {{"previous_state", previous_state}, {"previous_supervisor_pid", previous_supervisor_pid},
                      {"previous_supervisor_host", previous_supervisor_host}, {"waited_ms", waited_ms},
                      {"resume_step", resume_step}, {"gen", gen}, {"supervisor_pid", supervisor_pid},
                      {"supervisor_host", supervisor_host}, {"dtrain_version", dtrain_version},
                      {"detached", detached}});
}

json RunState::to_json() const { return named(name, {{"state", state}, {"why", why}}); }

json RunStopRequested::to_json() const { return named(name, {{"reason", reason}}); }

json RunFinished::to_json() const {
  json out = named(name, {{"state", state}, {"exit_code", exit_code}, {"restarts", restarts},
                          {"generations", generations}, {"duration_ms", duration_ms}});
  if (!incidents.empty()) out["incidents"] = incidents;
  put_if(out, "root_cause", root_cause);
  if (!reason.empty()) out["reason"] = reason;
  return out;
}

json RunlogDropped::to_json() const {
  return named(name, {{"bytes", bytes}, {"writes", writes}, {"detail", detail}, {"kinds", kinds},
                      {"first_ts", first_ts}, {"last_ts", last_ts}});
}

// ---- hosts

json RuntimeDirFallback::to_json() const { return named(name, {{"path", path}, {"refused", refused}}); }
json SshInsecure::to_json() const { return named(name, {{"detail", detail}}); }

json HostConnected::to_json() const {
  return named(name, {{"host", host}, {"agent_pid", agent_pid}, {"version", version},
                      {"clock_offset_ms", clock_offset_ms}});
}

json HostFacts::to_json() const {
  json out = named(name, {{"host", host}});
  if (agent_facts.is_object()) {
    for (const char* key : {"hostname", "os", "arch", "cpus", "memory_mb", "gpus"}) {
      if (agent_facts.contains(key)) out[key] = agent_facts[key];
    }
  }
  return out;
}

json HostFailed::to_json() const { return named(name, {{"host", host}, {"error", error}}); }

json HostLost::to_json() const {
  json out = named(name, {{"host", host}, {"reason", reason}, {"was_connected", was_connected}});
  put_if(out, "silent_ms", silent_ms);
  return out;
}

json HostExcluded::to_json() const { return host_failure_count(name, *this); }

json HostExclusionSkipped::to_json() const { return host_failure_count(name, *this); }

json AgentError::to_json() const { return named(name, {{"host", host}, {"message", message}}); }

json ProtocolError::to_json() const {
  json out = named(name, {{"sender", sender}, {"host", host}, {"error", error}, {"count", count}});
  put_if(out, "pid", pid);
  put_if(out, "gen", gen);
  put_if(out, "rank", rank);
  return out;
}

json SignalRefused::to_json() const {
  return named(name, {{"target", target}, {"signal", signal}, {"error", error}});
}

// ---- generations and workers

json PlanGeneration::to_json() const {
  return named(name, {{"gen", gen}, {"world_size", world_size}, {"data", data}, {"tensor", tensor},
                      {"pipeline", pipeline}, {"grad_accum", grad_accum}, {"resume_step", resume_step},
                      {"hosts", hosts}});
}

json PlanChanged::to_json() const { return named(name, {{"diff", diff}, {"without", without}}); }

json GenerationSpawned::to_json() const {
  return named(name, {{"gen", gen}, {"master_addr", master_addr}, {"master_port", master_port}, {"backend", backend},
                      {"resume_step", resume_step}, {"checkpoint_dir", checkpoint_dir}});
}

json GenerationStepped::to_json() const {
  return named(name, {{"gen", gen}, {"step", step}, {"ms_since_spawn", ms_since_spawn}});
}

json WorkerStarted::to_json() const {
  return named(name, {{"rank", rank}, {"host", host}, {"local_rank", local_rank}, {"pid", pid}});
}

json WorkerSpawnFailed::to_json() const { return named(name, {{"rank", rank}, {"host", host}, {"error", error}}); }

json WorkerError::to_json() const {
  json out = {{"message", message}};
  put_if(out, "type", type);
  put_if(out, "traceback", traceback);
  put_if(out, "timestamp", timestamp);
  return out;
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

json WorkerHang::to_json() const {
  return named(name, {{"rank", rank}, {"host", host}, {"pid", pid}, {"step", step}, {"phase", phase},
                      {"silent_ms", silent_ms}});
}

json WorkerSample::to_json() const {
  json out = named(name, {{"rank", rank}, {"host", host}, {"pid", pid}});
  put_if(out, "error", error);
  return out;
}

json CommReady::to_json() const { return named(name, {{"ranks", ranks}, {"ms_since_spawn", ms_since_spawn}}); }

json CommWarn::to_json() const {
  json out = named(name, {{"gen", gen}, {"rank", rank}, {"host", host}, {"line", line}});
  if (repeated > 0) {
    out["repeated"] = repeated;
    out["window_s"] = window_s;
    out["detail"] = detail;
  }
  return out;
}

json HangDump::to_json() const {
  json out = named(name, {{"gen", gen}, {"rank", rank}, {"host", host}, {"pid", pid}, {"dump_bytes", dump_bytes}});
  put_if(out, "error", error);
  put_if(out, "kept_path", kept_path);
  put_if(out, "detail", detail);
  return out;
}

json HangDetectionOff::to_json() const { return named(name, {{"ranks", ranks}, {"detail", detail}}); }

json HangDetectionOn::to_json() const {
  return named(name, {{"ranks", ranks}, {"after_ms", after_ms}, {"detail", detail}});
}

json StragglerDetected::to_json() const { return straggler_score(name, *this); }

json StragglerCleared::to_json() const { return straggler_score(name, *this); }

// ---- GPUs

json GpuXid::to_json() const { return named(name, {{"host", host}, {"gpu", gpu}, {"xid", xid}}); }

json GpuEccErrors::to_json() const {
  return named(name, {{"host", host}, {"gpu", gpu}, {"uncorrected", uncorrected}, {"previous", previous}});
}

// ---- failures and recoveries

json FailureCause::to_json() const {
  json out = {{"kind", kind}, {"host", host}, {"detail", detail}};
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

json FailureDetected::to_json() const {
  json out = named(name, cause.to_json());
  put_if(out, "latency_ms", latency_ms);
  put_if(out, "detected_by", detected_by);
  return out;
}

json FailureRootCause::to_json() const { return named(name, {{"rank", rank}, {"host", host}, {"detail", detail}}); }

json FailureBudgetExhausted::to_json() const {
  return named(name, {{"max_restarts", max_restarts}, {"restart_window_ms", restart_window_ms}, {"detail", detail}});
}

json FailureCrashLoop::to_json() const { return named(name, {{"generations", generations}, {"detail", detail}}); }

json FailureUnrecoverable::to_json() const { return named(name, {{"detail", detail}}); }

json RecoveryStarted::to_json() const {
  json out = named(name, {{"cause", cause.to_json()}, {"restarts", restarts}, {"action", action}});
  put_if(out, "why", why);
  return out;
}

json RecoveryCompleted::to_json() const {
  json out = named(name, {{"kind", kind}, {"cause", cause.to_json()}, {"phases", phases}, {"resume_step", resume_step},
                      {"last_step", last_step}, {"steps_lost", steps_lost}, {"world_size", world_size},
                      {"restarts", restarts}, {"action", action}});
  put_if(out, "fallback", fallback);
  return out;
}

json RecoveryCarriedOver::to_json() const {
  return named(name, {{"gen", gen}, {"host", host}, {"ranks", ranks}, {"pids", pids}});
}

json RecoveryFallback::to_json() const { return named(name, {{"gen", gen}, {"detail", detail}}); }

json ResourcesReleased::to_json() const {
  return named(name, {{"gen", gen}, {"host", host}, {"killed", killed}, {"remaining", remaining}, {"ms", ms}});
}

json ResourcesUnconfirmed::to_json() const { return named(name, {{"hosts", hosts}, {"detail", detail}}); }

// ---- checkpoints

json CheckpointCommitted::to_json() const {
  return named(name, {{"gen", gen}, {"rank", rank}, {"host", host}, {"step", step}, {"bytes", bytes},
                      {"seconds", seconds}});
}

json CheckpointRejected::to_json() const {
  return named(name, {{"gen", gen}, {"rank", rank}, {"host", host}, {"step", step}, {"reason", reason}});
}

json CheckpointRequested::to_json() const {
  return named(name, {{"gen", gen}, {"reason", reason}, {"step", step}, {"ranks", ranks}});
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

json DrillCorrupted::to_json() const { return named(name, {{"step", step}, {"file", file}, {"why", why}}); }

json DrillVerdict::to_json() const { return named(name, report); }

}  // namespace dtrain::events
