// to_json and from_json of the run's and the hosts' events (events.h).

#include "launcher/events/events.h"

#include "launcher/events/event_fields.h"

namespace dtrain::events {

using nlohmann::json;
using detail::EventFields;
using detail::named;
using detail::put_if;

namespace {

/// The host facts an agent reports that host.facts copies (the rest of its JSON is left out).
constexpr const char* kHostFactKeys[] = {"hostname", "os", "arch", "cpus", "memory_mb", "gpus"};

json host_failure_count(const char* name, const HostFailureCount& event) {
  return named(name, {{"host", event.host}, {"failures", event.failures}, {"detail", event.detail}});
}

// The objects' fields, then `more`.
json kubernetes_objects(const char* name, const KubernetesObjects& objects, json more) {
  more["namespace"] = objects.namespace_name;
  more["job"] = objects.job;
  more["service"] = objects.service;
  more["kind"] = to_string(objects.kind);
  return named(name, std::move(more));
}

EventFields& read_kubernetes_objects(EventFields& fields, KubernetesObjects& objects) {
  return fields.read("namespace", objects.namespace_name).read("job", objects.job).read("service", objects.service)
      .read("kind", objects.kind);
}

}  // namespace

// ---- the run

json RunSubmitted::to_json() const {
  return named(name, {{"run_id", run_id}, {"name", run_name}, {"tenant", tenant}, {"user", user}, {"spec", spec},
                      {"hosts", hosts}, {"world_size", world_size}, {"dtrain_version", dtrain_version},
                      {"supervisor_pid", supervisor_pid}, {"supervisor_host", supervisor_host},
                      {"detached", detached}});
}

Result<RunSubmitted> RunSubmitted::from_json(const json& object) {
  EventFields fields(name, object);
  RunSubmitted event;
  fields.read("run_id", event.run_id).read("name", event.run_name).read("tenant", event.tenant)
      .read("user", event.user).read("spec", event.spec).read("hosts", event.hosts)
      .read("world_size", event.world_size).read("dtrain_version", event.dtrain_version)
      .read("supervisor_pid", event.supervisor_pid).read("supervisor_host", event.supervisor_host)
      .read("detached", event.detached);
  return fields.result(std::move(event));
}

json RunResumed::to_json() const {
  return named(name, {{"previous_state", previous_state}, {"previous_supervisor_pid", previous_supervisor_pid},
                      {"previous_supervisor_host", previous_supervisor_host}, {"waited_ms", waited_ms},
                      {"resume_step", resume_step}, {"gen", gen}, {"supervisor_pid", supervisor_pid},
                      {"supervisor_host", supervisor_host}, {"dtrain_version", dtrain_version},
                      {"detached", detached}});
}

Result<RunResumed> RunResumed::from_json(const json& object) {
  EventFields fields(name, object);
  RunResumed event;
  fields.read("previous_state", event.previous_state).read("previous_supervisor_pid", event.previous_supervisor_pid)
      .read("previous_supervisor_host", event.previous_supervisor_host).read("waited_ms", event.waited_ms)
      .read("resume_step", event.resume_step).read("gen", event.gen).read("supervisor_pid", event.supervisor_pid)
      .read("supervisor_host", event.supervisor_host).read("dtrain_version", event.dtrain_version)
      .read("detached", event.detached);
  return fields.result(std::move(event));
}

json RunState::to_json() const { return named(name, {{"state", state}, {"why", why}}); }

Result<RunState> RunState::from_json(const json& object) {
  EventFields fields(name, object);
  RunState event;
  fields.read("state", event.state).read("why", event.why);
  return fields.result(std::move(event));
}

json RunStopRequested::to_json() const { return named(name, {{"reason", reason}}); }

Result<RunStopRequested> RunStopRequested::from_json(const json& object) {
  EventFields fields(name, object);
  RunStopRequested event;
  fields.read("reason", event.reason);
  return fields.result(std::move(event));
}

json RunRootCause::to_json() const {
  json out = {{"kind", to_string(kind)}, {"host", host}, {"rank", rank}, {"detail", detail}};
  put_if(out, "traceback", traceback);
  return out;
}

Result<RunRootCause> RunRootCause::from_json(const json& object) {
  EventFields fields("root_cause", object);
  RunRootCause cause;
  fields.read("kind", cause.kind).read("host", cause.host).read("rank", cause.rank).read("detail", cause.detail)
      .read("traceback", cause.traceback);
  return fields.result(std::move(cause));
}

json RunFinished::to_json() const {
  json out = named(name, {{"state", state}, {"exit_code", exit_code}, {"restarts", restarts},
                          {"generations", generations}, {"duration_ms", duration_ms}});
  if (!incidents.empty()) out["incidents"] = incidents;
  if (root_cause) out["root_cause"] = root_cause->to_json();
  if (!reason.empty()) out["reason"] = reason;
  return out;
}

Result<RunFinished> RunFinished::from_json(const json& object) {
  EventFields fields(name, object);
  RunFinished event;
  fields.read("state", event.state).read("exit_code", event.exit_code).read("restarts", event.restarts)
      .read("generations", event.generations).read("duration_ms", event.duration_ms)
      .read("incidents", event.incidents).read("reason", event.reason);
  fields.read_nested("root_cause", event.root_cause);
  return fields.result(std::move(event));
}

json RunlogDropped::to_json() const {
  return named(name, {{"bytes", bytes}, {"writes", writes}, {"detail", detail}, {"kinds", kinds},
                      {"first_ts", first_ts}, {"last_ts", last_ts}});
}

Result<RunlogDropped> RunlogDropped::from_json(const json& object) {
  EventFields fields(name, object);
  RunlogDropped event;
  fields.read("bytes", event.bytes).read("writes", event.writes).read("detail", event.detail)
      .read("kinds", event.kinds).read("first_ts", event.first_ts).read("last_ts", event.last_ts);
  return fields.result(std::move(event));
}

// ---- hosts

json RuntimeDirFallback::to_json() const { return named(name, {{"path", path}, {"refused", refused}}); }

Result<RuntimeDirFallback> RuntimeDirFallback::from_json(const json& object) {
  EventFields fields(name, object);
  RuntimeDirFallback event;
  fields.read("path", event.path).read("refused", event.refused);
  return fields.result(std::move(event));
}
json KubernetesCreated::to_json() const { return kubernetes_objects(name, *this, {{"selector", selector}, {"pods", pods}}); }

Result<KubernetesCreated> KubernetesCreated::from_json(const json& object) {
  EventFields fields(name, object);
  KubernetesCreated event;
  read_kubernetes_objects(fields, event).read("selector", event.selector).read("pods", event.pods);
  return fields.result(std::move(event));
}

json KubernetesDeleted::to_json() const {
  json out = kubernetes_objects(name, *this, {{"why", why}});
  put_if(out, "error", error);
  return out;
}

Result<KubernetesDeleted> KubernetesDeleted::from_json(const json& object) {
  EventFields fields(name, object);
  KubernetesDeleted event;
  read_kubernetes_objects(fields, event).read("why", event.why).read("error", event.error);
  return fields.result(std::move(event));
}

json SshInsecure::to_json() const { return named(name, {{"detail", detail}}); }

Result<SshInsecure> SshInsecure::from_json(const json& object) {
  EventFields fields(name, object);
  SshInsecure event;
  fields.read("detail", event.detail);
  return fields.result(std::move(event));
}

json HostConnected::to_json() const {
  json out = named(name, {{"host", host}, {"agent_pid", agent_pid}, {"version", version},
                          {"clock_offset_ms", clock_offset_ms}});
  if (!relayed_by.empty()) out["relayed_by"] = relayed_by;
  return out;
}

Result<HostConnected> HostConnected::from_json(const json& object) {
  EventFields fields(name, object);
  HostConnected event;
  fields.read("host", event.host).read("agent_pid", event.agent_pid).read("version", event.version)
      .read("clock_offset_ms", event.clock_offset_ms).read("relayed_by", event.relayed_by);
  return fields.result(std::move(event));
}

json HostReattached::to_json() const {
  return named(name, {{"host", host}, {"from", from}, {"detached_ms", detached_ms}, {"gap_ms", gap_ms}, {"workers", workers}});
}

Result<HostReattached> HostReattached::from_json(const json& object) {
  EventFields fields(name, object);
  HostReattached event;
  fields.read("host", event.host).read("from", event.from).read("detached_ms", event.detached_ms)
      .read("gap_ms", event.gap_ms).read("workers", event.workers);
  return fields.result(std::move(event));
}

json HostFacts::to_json() const {
  json out = named(name, {{"host", host}});
  if (agent_facts.is_object()) {
    for (const char* key : kHostFactKeys) {
      if (agent_facts.contains(key)) out[key] = agent_facts[key];
    }
  }
  return out;
}

Result<HostFacts> HostFacts::from_json(const json& object) {
  EventFields fields(name, object);
  HostFacts event;
  fields.read("host", event.host);
  for (const char* key : kHostFactKeys) {
    if (const json* fact = json_member(object, key)) event.agent_facts[key] = *fact;
  }
  return fields.result(std::move(event));
}

json HostFailed::to_json() const { return named(name, {{"host", host}, {"error", error}}); }

Result<HostFailed> HostFailed::from_json(const json& object) {
  EventFields fields(name, object);
  HostFailed event;
  fields.read("host", event.host).read("error", event.error);
  return fields.result(std::move(event));
}

json HostLost::to_json() const {
  json out = named(name, {{"host", host}, {"reason", reason}, {"was_connected", was_connected}});
  put_if(out, "silent_ms", silent_ms);
  return out;
}

Result<HostLost> HostLost::from_json(const json& object) {
  EventFields fields(name, object);
  HostLost event;
  fields.read("host", event.host).read("reason", event.reason).read("was_connected", event.was_connected)
      .read("silent_ms", event.silent_ms);
  return fields.result(std::move(event));
}

json HostExcluded::to_json() const { return host_failure_count(name, *this); }

Result<HostExcluded> HostExcluded::from_json(const json& object) {
  EventFields fields(name, object);
  HostExcluded event;
  fields.read("host", event.host).read("failures", event.failures).read("detail", event.detail);
  return fields.result(std::move(event));
}

json HostExclusionSkipped::to_json() const { return host_failure_count(name, *this); }

Result<HostExclusionSkipped> HostExclusionSkipped::from_json(const json& object) {
  EventFields fields(name, object);
  HostExclusionSkipped event;
  fields.read("host", event.host).read("failures", event.failures).read("detail", event.detail);
  return fields.result(std::move(event));
}

json AgentError::to_json() const { return named(name, {{"host", host}, {"message", message}}); }

Result<AgentError> AgentError::from_json(const json& object) {
  EventFields fields(name, object);
  AgentError event;
  fields.read("host", event.host).read("message", event.message);
  return fields.result(std::move(event));
}

json ProtocolError::to_json() const {
  json out = named(name, {{"sender", sender}, {"host", host}, {"error", error}, {"count", count}});
  put_if(out, "pid", pid);
  put_if(out, "gen", gen);
  put_if(out, "rank", rank);
  return out;
}

Result<ProtocolError> ProtocolError::from_json(const json& object) {
  EventFields fields(name, object);
  ProtocolError event;
  fields.read("sender", event.sender).read("host", event.host).read("error", event.error).read("count", event.count)
      .read("pid", event.pid).read("gen", event.gen).read("rank", event.rank);
  return fields.result(std::move(event));
}

json SignalRefused::to_json() const {
  return named(name, {{"target", target}, {"signal", signal}, {"error", error}});
}

Result<SignalRefused> SignalRefused::from_json(const json& object) {
  EventFields fields(name, object);
  SignalRefused event;
  fields.read("target", event.target).read("signal", event.signal).read("error", event.error);
  return fields.result(std::move(event));
}

}  // namespace dtrain::events
