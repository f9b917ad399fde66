// JobSpec → YAML: the resolved spec a run directory keeps as spec.yaml. Every key is written
// (defaults included) so a reader sees exactly what ran; parsing it again gives an equal JobSpec.

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cstdio>

#include "launcher/base/secrets.h"

#include "launcher/spec/spec_loader.h"

namespace dtrain::spec {
namespace {

// format_duration rounds some values ("1.23s" for 1234ms); write those in ms so they read back
// exactly.
std::string exact_duration(Millis duration) {
  std::string text = format_duration(duration);
  auto back = parse_duration(text);
  return back && *back == duration ? text : std::to_string(duration.count()) + "ms";
}

// User strings are always quoted: a plain `~`, `null` or `yes` would read back as something else.
void string_value(YAML::Emitter& out, const char* key, const std::string& value) {
  out << YAML::Key << key << YAML::Value << YAML::DoubleQuoted << value;
}

void duration_value(YAML::Emitter& out, const char* key, Millis value) {
  out << YAML::Key << key << YAML::Value << exact_duration(value);
}

void host_list(YAML::Emitter& out, const char* key, const std::vector<HostEntry>& hosts) {
  if (hosts.empty()) return;
  out << YAML::Key << key << YAML::Value << YAML::BeginSeq;
  for (const HostEntry& host : hosts) {
    out << YAML::Flow << YAML::BeginMap;
    string_value(out, "name", host.name);
    if (!host.user.empty()) string_value(out, "user", host.user);
    if (host.port != 0) out << YAML::Key << "port" << YAML::Value << host.port;
    if (host.slots != 0) out << YAML::Key << "slots" << YAML::Value << host.slots;
    if (!host.only_slots.empty()) {
      out << YAML::Key << "only_slots" << YAML::Value << YAML::Flow << host.only_slots;
    }
    if (!host.address.empty()) string_value(out, "address", host.address);
    out << YAML::EndMap;
  }
  out << YAML::EndSeq;
}

void string_list(YAML::Emitter& out, const char* key, const std::vector<std::string>& values) {
  out << YAML::Key << key << YAML::Value << YAML::Flow << YAML::BeginSeq;
  for (const std::string& value : values) out << YAML::DoubleQuoted << value;
  out << YAML::EndSeq;
}

bool contains(const std::vector<std::string>& sorted, const std::string& name) {
  return std::binary_search(sorted.begin(), sorted.end(), name);
}

// No secret is written: spec.yaml goes into tarballs and bug reports. worker.env keeps its plain
// values; a name that looks_secret is written to pass_env instead (its value comes from dtrain's
// environment on resume); the env_file is kept as its path and names and read again on resume.
void worker_env(YAML::Emitter& out, const WorkerSettings& worker) {
  std::vector<std::string> pass_env = worker.pass_env;
  out << YAML::Key << "env" << YAML::Value;
  std::vector<std::pair<std::string, std::string>> plain;
  for (const auto& [name, value] : worker.env) {
    if (contains(worker.pass_env, name) || contains(worker.env_from_file, name)) continue;
    if (looks_secret(name)) pass_env.push_back(name);
    else plain.emplace_back(name, value);
  }
  if (plain.empty()) out << YAML::Flow;
  out << YAML::BeginMap;
  for (const auto& [name, value] : plain) string_value(out, name.c_str(), value);
  out << YAML::EndMap;
  std::sort(pass_env.begin(), pass_env.end());
  if (!pass_env.empty()) string_list(out, "pass_env", pass_env);
  if (!worker.env_file.empty()) {
    string_value(out, "env_file", worker.env_file);
    string_list(out, "env_file_names", worker.env_file_names);
  }
}

// ssh: how hosts are reached.
void ssh_section(YAML::Emitter& out, const JobSpec& spec) {
  out << YAML::Key << "ssh" << YAML::Value << YAML::BeginMap;
  string_value(out, "user", spec.ssh.user);
  out << YAML::Key << "port" << YAML::Value << spec.ssh.port;
  out << YAML::Key << "identity" << YAML::Value << YAML::Flow << YAML::BeginSeq;
  for (const std::string& identity : spec.ssh.identity) out << YAML::DoubleQuoted << identity;
  out << YAML::EndSeq;
  string_value(out, "known_hosts", spec.ssh.known_hosts);
  out << YAML::Key << "host_key_policy" << YAML::Value << to_string(spec.ssh.host_key_policy);
  duration_value(out, "connect_timeout", spec.ssh.connect_timeout);
  out << YAML::Key << "max_parallel" << YAML::Value << spec.ssh.max_parallel;
  string_value(out, "remote_dtrain", spec.ssh.remote_dtrain);
  out << YAML::Key << "client" << YAML::Value << to_string(spec.ssh.client);
  if (!spec.ssh.config.empty()) string_value(out, "config", spec.ssh.config);
  out << YAML::EndMap;
}

// worker: what runs on each slot, and the warm pool.
void worker_section(YAML::Emitter& out, const JobSpec& spec) {
  out << YAML::Key << "worker" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "command" << YAML::Value << YAML::Flow << YAML::BeginSeq;
  for (const std::string& argument : spec.worker.command) out << YAML::DoubleQuoted << argument;
  out << YAML::EndSeq;
  string_value(out, "workdir", spec.worker.workdir);
  worker_env(out, spec.worker);
  out << YAML::Key << "backend" << YAML::Value << to_string(spec.worker.backend);
  out << YAML::Key << "instrument" << YAML::Value << (spec.worker.instrument ? "on" : "off");
  if (spec.worker.pool_per_host > 0) {
    out << YAML::Key << "pool" << YAML::Value << YAML::BeginMap;
    out << YAML::Key << "per_host" << YAML::Value << spec.worker.pool_per_host;
    out << YAML::Key << "imports" << YAML::Value << YAML::Flow << YAML::BeginSeq;
    for (const std::string& name : spec.worker.pool_imports) out << name;
    out << YAML::EndSeq << YAML::EndMap;
  }
  out << YAML::EndMap;
}

// parallelism and batch: the shape of the job.
void layout_sections(YAML::Emitter& out, const JobSpec& spec) {
  out << YAML::Key << "parallelism" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "tensor" << YAML::Value << spec.parallelism.tensor;
  out << YAML::Key << "pipeline" << YAML::Value << spec.parallelism.pipeline;
  out << YAML::Key << "data" << YAML::Value;
  if (spec.parallelism.data == 0) out << "auto";
  else out << spec.parallelism.data;
  out << YAML::EndMap;

  out << YAML::Key << "batch" << YAML::Value;  // 0 means unset: left out
  if (spec.batch.global == 0 && spec.batch.micro == 0) out << YAML::Flow;
  out << YAML::BeginMap;
  if (spec.batch.global != 0) out << YAML::Key << "global" << YAML::Value << spec.batch.global;
  if (spec.batch.micro != 0) out << YAML::Key << "micro" << YAML::Value << spec.batch.micro;
  out << YAML::EndMap;
}

// elastic: what a failure may cost.
void elastic_section(YAML::Emitter& out, const JobSpec& spec) {
  out << YAML::Key << "elastic" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "min_hosts" << YAML::Value << spec.elastic.min_hosts;
  out << YAML::Key << "max_restarts" << YAML::Value << spec.elastic.max_restarts;
  duration_value(out, "restart_window", spec.elastic.restart_window);
  out << YAML::Key << "exclude_after" << YAML::Value << spec.elastic.exclude_after;
  out << YAML::Key << "crash_loop_after" << YAML::Value << spec.elastic.crash_loop_after;
  if (spec.elastic.progress_window.count() > 0) duration_value(out, "progress_window", spec.elastic.progress_window);
  else out << YAML::Key << "progress_window" << YAML::Value << "auto";
  if (spec.elastic.in_place) out << YAML::Key << "in_place" << YAML::Value << true;
  if (spec.elastic.in_place_timeout.count() > 0) duration_value(out, "in_place_timeout", spec.elastic.in_place_timeout);
  if (spec.elastic.standby_per_host > 0) out << YAML::Key << "standby_per_host" << YAML::Value << spec.elastic.standby_per_host;
  out << YAML::EndMap;
}

// heartbeat: when a silent or stuck rank is a failure.
void heartbeat_section(YAML::Emitter& out, const JobSpec& spec) {
  out << YAML::Key << "heartbeat" << YAML::Value << YAML::BeginMap;
  duration_value(out, "interval", spec.heartbeat.interval);
  duration_value(out, "timeout", spec.heartbeat.timeout);
  if (spec.heartbeat.hang_timeout_auto()) out << YAML::Key << "hang_timeout" << YAML::Value << "auto";
  else duration_value(out, "hang_timeout", spec.heartbeat.hang_timeout);
  if (spec.heartbeat.checkpoint_timeout.count() > 0) {
    duration_value(out, "checkpoint_timeout", spec.heartbeat.checkpoint_timeout);
  }
  out << YAML::EndMap;
}

// checkpoint: where, how often, how many.
void checkpoint_section(YAML::Emitter& out, const JobSpec& spec) {
  out << YAML::Key << "checkpoint" << YAML::Value << YAML::BeginMap;
  string_value(out, "dir", spec.checkpoint.dir);
  out << YAML::Key << "interval_steps" << YAML::Value << spec.checkpoint.interval_steps;
  out << YAML::Key << "keep" << YAML::Value << spec.checkpoint.keep;
  if (spec.checkpoint.file_mode != 0600) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(spec.checkpoint.file_mode));
    string_value(out, "file_mode", mode);
  }
  if (spec.checkpoint.before_walltime.count() > 0) {
    duration_value(out, "before_walltime", spec.checkpoint.before_walltime);
  }
  out << YAML::EndMap;
}

// metrics and logs: left out when default, so specs of older runs read back the same.
void observability_sections(YAML::Emitter& out, const JobSpec& spec) {
  if (!(spec.metrics == MetricsSettings{})) {  // left out when default: specs of older runs read back the same
    out << YAML::Key << "metrics" << YAML::Value << YAML::BeginMap;
    if (!spec.metrics.textfile_dir.empty()) string_value(out, "textfile_dir", spec.metrics.textfile_dir);
    if (!spec.metrics.listen.empty()) string_value(out, "listen", spec.metrics.listen);
    out << YAML::Key << "straggler_threshold" << YAML::Value << spec.metrics.straggler_threshold;
    duration_value(out, "interval", spec.metrics.interval);
    out << YAML::EndMap;
  }

  if (!(spec.logs == LogsSettings{})) {  // left out when default, like metrics
    out << YAML::Key << "logs" << YAML::Value << YAML::BeginMap;
    if (spec.logs.max_bytes == 0) {
      string_value(out, "max_bytes", "unlimited");
    } else {
      out << YAML::Key << "max_bytes" << YAML::Value << spec.logs.max_bytes;
    }
    out << YAML::EndMap;
  }
}

/// scale: only when not the default.
void scale_section(YAML::Emitter& out, const JobSpec& spec) {
  if (spec.scale == ScaleSettings{}) return;
  out << YAML::Key << "scale" << YAML::Value << YAML::BeginMap;
  const char* tree = spec.scale.tree == RelayTreeMode::on ? "on" : spec.scale.tree == RelayTreeMode::off ? "off" : "auto";
  string_value(out, "tree", tree);
  if (spec.scale.fanout > 0) out << YAML::Key << "fanout" << YAML::Value << spec.scale.fanout;
  out << YAML::EndMap;
}

/// intent: only when the spec stated one; amounts as plain numbers, so they read back the same.
void health_section(YAML::Emitter& out, const JobSpec& spec) {
  const HealthSettings& health = spec.health;
  if (health == HealthSettings{}) return;
  auto megabytes = [&](const char* key, uint64_t value) {
    out << YAML::Key << key << YAML::Value << std::to_string(value) + "MiB";
  };
  out << YAML::Key << "health" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "enabled" << YAML::Value << (health.enabled ? "true" : "false");
  if (!health.command.empty()) string_value(out, "command", health.command);
  duration_value(out, "command_timeout", health.command_timeout);
  if (!health.diagnose.empty()) string_value(out, "diagnose", health.diagnose);
  duration_value(out, "diagnose_timeout", health.diagnose_timeout);
  megabytes("leftover_gpu_memory", health.leftover_gpu_memory_mb);
  duration_value(out, "reclaim_wait", health.reclaim_wait);
  duration_value(out, "write_timeout", health.write_timeout);
  megabytes("min_free", health.min_free_mb);
  out << YAML::Key << "quarantine" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "after" << YAML::Value << health.quarantine_after;
  duration_value(out, "window", health.quarantine_window);
  duration_value(out, "for", health.quarantine_duration);
  out << YAML::EndMap << YAML::EndMap;
}

void intent_section(YAML::Emitter& out, const JobSpec& spec) {
  const IntentSettings& intent = spec.intent;
  if (!intent.given) return;
  auto number = [&](const char* key, double value) {
    char text[40];
    std::snprintf(text, sizeof text, "%.17g", value);
    out << YAML::Key << key << YAML::Value << text;
  };
  out << YAML::Key << "intent" << YAML::Value << YAML::BeginMap;
  if (intent.parameters > 0 || intent.state_bytes > 0) {
    out << YAML::Key << "model" << YAML::Value << YAML::BeginMap;
    if (intent.parameters > 0) number("parameters", intent.parameters);
    out << YAML::Key << "precision" << YAML::Value << to_string(intent.precision);
    out << YAML::Key << "optimizer" << YAML::Value << to_string(intent.optimizer);
    if (intent.state_bytes > 0) out << YAML::Key << "state_bytes" << YAML::Value << intent.state_bytes;
    out << YAML::EndMap;
  }
  if (intent.samples > 0 || intent.tokens > 0 || intent.sequence_length > 0) {
    out << YAML::Key << "data" << YAML::Value << YAML::BeginMap;
    if (intent.samples > 0) number("samples", intent.samples);
    if (intent.tokens > 0) number("tokens", intent.tokens);
    if (intent.sequence_length > 0) out << YAML::Key << "sequence_length" << YAML::Value << intent.sequence_length;
    out << YAML::EndMap;
  }
  if (intent.target_duration.count() > 0) duration_value(out, "target_duration", intent.target_duration);
  if (intent.gpu_memory_bytes > 0) out << YAML::Key << "gpu_memory" << YAML::Value << intent.gpu_memory_bytes;
  out << YAML::Key << "recovery" << YAML::Value << YAML::BeginMap;
  if (intent.max_recovery.count() > 0) duration_value(out, "max_recovery", intent.max_recovery);
  if (intent.max_lost_steps > 0) out << YAML::Key << "max_lost" << YAML::Value << std::to_string(intent.max_lost_steps) + " steps";
  if (intent.max_lost_time.count() > 0) duration_value(out, "max_lost", intent.max_lost_time);
  out << YAML::Key << "mode" << YAML::Value << to_string(intent.mode);
  out << YAML::EndMap << YAML::EndMap;
}

// kubernetes: as read. Submit keeps a created job's template and no hosts (launcher/run
// created_pods.h, spec_to_keep): its pods are deleted at the end, and a resume creates fresh ones.
// A spec with both a selector and a job (none that the loader accepts) keeps the selector.
void kubernetes_section(YAML::Emitter& out, const JobSpec& spec) {
  const KubernetesSettings& kube = spec.kubernetes;
  if (!kube.enabled) return;
  out << YAML::Key << "kubernetes" << YAML::Value << YAML::BeginMap;
  if (!kube.namespace_name.empty()) string_value(out, "namespace", kube.namespace_name);
  if (!kube.selector.empty()) string_value(out, "selector", kube.selector);
  if (kube.job && kube.selector.empty()) {
    const KubernetesJobTemplate& job = *kube.job;
    out << YAML::Key << "job" << YAML::Value << YAML::BeginMap;
    out << YAML::Key << "kind" << YAML::Value << to_string(job.kind);
    string_value(out, "image", job.image);
    out << YAML::Key << "pods" << YAML::Value << job.pods;
    out << YAML::Key << "gpus_per_pod" << YAML::Value << job.gpus_per_pod;
    if (!job.node_selector.empty()) {
      out << YAML::Key << "node_selector" << YAML::Value << YAML::BeginMap;
      for (const auto& [label, value] : job.node_selector) string_value(out, label.c_str(), value);
      out << YAML::EndMap;
    }
    out << YAML::Key << "tolerations" << YAML::Value << YAML::BeginMap;
    duration_value(out, "not_ready", job.not_ready_toleration);
    duration_value(out, "unreachable", job.unreachable_toleration);
    out << YAML::EndMap;
    string_list(out, "command", job.command);
    out << YAML::EndMap;
  }
  if (!kube.container.empty()) string_value(out, "container", kube.container);
  if (!kube.context.empty()) string_value(out, "context", kube.context);
  if (!kube.kubeconfig.empty()) string_value(out, "kubeconfig", kube.kubeconfig);
  string_value(out, "kubectl", kube.kubectl);
  out << YAML::Key << "spares" << YAML::Value << kube.spares;
  duration_value(out, "pod_timeout", kube.pod_timeout);
  out << YAML::EndMap;
}

}  // namespace

std::string to_yaml(const JobSpec& spec) {
  YAML::Emitter out;
  out << YAML::Comment("dtrain job spec, resolved: hosts expanded, defaults filled (man 5 dtrain-spec)");
  out << YAML::Newline << YAML::BeginMap;
  out << YAML::Key << "version" << YAML::Value << 1;
  string_value(out, "name", spec.name);
  string_value(out, "tenant", spec.tenant);
  out << YAML::Key << "slots_per_host" << YAML::Value << spec.slots_per_host;
  if (spec.kubernetes.enabled && spec.hosts.empty()) {
    out << YAML::Key << "hosts" << YAML::Value << "kubernetes";  // pods found at submit
  }
  host_list(out, "hosts", spec.hosts);
  host_list(out, "spares", spec.spares);
  kubernetes_section(out, spec);

  ssh_section(out, spec);
  if (spec.transport != TransportKind::auto_select) {
    out << YAML::Key << "transport" << YAML::Value << to_string(spec.transport);
  }
  if (spec.consistency != Consistency::strict) {
    out << YAML::Key << "consistency" << YAML::Value << to_string(spec.consistency);
  }

  worker_section(out, spec);
  layout_sections(out, spec);
  elastic_section(out, spec);
  heartbeat_section(out, spec);
  checkpoint_section(out, spec);
  observability_sections(out, spec);
  intent_section(out, spec);
  health_section(out, spec);
  scale_section(out, spec);
  duration_value(out, "stop_grace", spec.stop_grace);
  duration_value(out, "preempt_grace", spec.preempt_grace);
  out << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

}  // namespace dtrain::spec
