#include "launcher/spec/spec_sections.h"

#include <sys/stat.h>

#include <cerrno>
#include <charconv>
#include <filesystem>

#include "launcher/base/regular_file.h"
#include "launcher/base/strings.h"
#include "launcher/spec/hostlist.h"
#include "launcher/spec/spec_hosts.h"

namespace dtrain::spec {
namespace {

constexpr int kMaxCount = 1 << 20;  // far beyond any real job; keeps products inside int

// Names and tenants end up in run ids, directory names and SQL rows: keep them plain.
void read_label(DiagnosticSink& sink, const YAML::Node* node, const std::string& key, std::string& out) {
  auto text = read_string(sink, node, key);
  if (!text) return;
  bool plain = text->size() <= 64 && std::all_of(text->begin(), text->end(), [](char c) {
                 return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
                        c == '_' || c == '.';
               });
  if (!plain) {
    sink.error(*node, key, single_quoted(*text) + " may hold only letters, digits, '.', '_' and '-' (at most 64); write e.g. bert-large");
    return;
  }
  out = *text;
}

// ssh -F reads the file itself, on this machine: a FIFO there would hold every connection
// forever and a device would feed it without end, so anything but a regular file is refused now.
// A missing file is left to ssh, which names it ("Can't open user config file"): a spec is
// often validated on another machine than the one that runs it.
void refuse_unusable_ssh_config(DiagnosticSink& sink, const YAML::Node& node, const std::string& key,
                                const std::string& config) {
  std::string path = expand_home(config);
  struct stat info{};
  if (::stat(path.c_str(), &info) != 0 && errno == ENOENT) return;
  if (Result<UniqueFd> opened = open_regular_file(path, FollowLinks::kYes); !opened) {
    sink.error(node, key, opened.error().message + "; ssh.config names the ssh_config file that ssh -F reads");
  }
}

void read_ssh(DiagnosticSink& sink, const Section& root, SshSettings& ssh) {
  Section s(sink, root.get("ssh"), "ssh",
            {"user", "port", "identity", "known_hosts", "host_key_policy", "connect_timeout", "max_parallel",
             "remote_dtrain", "client", "config"});
  if (auto v = read_string(sink, s.get("user"), s.path("user"))) ssh.user = *v;
  if (auto v = read_int(sink, s.get("port"), s.path("port"), 1, 65535)) ssh.port = *v;
  if (auto v = read_string_list(sink, s.get("identity"), s.path("identity"), true)) ssh.identity = *v;
  if (auto v = read_string(sink, s.get("known_hosts"), s.path("known_hosts"))) ssh.known_hosts = *v;
  if (auto v = read_choice(sink, s.get("host_key_policy"), s.path("host_key_policy"), {"strict", "accept-new", "insecure"})) {
    ssh.host_key_policy = *v == "strict" ? HostKeyPolicy::strict
                          : *v == "accept-new" ? HostKeyPolicy::accept_new : HostKeyPolicy::insecure;
  }
  if (auto v = read_duration(sink, s.get("connect_timeout"), s.path("connect_timeout"), Millis(1))) ssh.connect_timeout = *v;
  if (auto v = read_int(sink, s.get("max_parallel"), s.path("max_parallel"), 1, kMaxCount)) ssh.max_parallel = *v;
  if (auto v = read_string(sink, s.get("remote_dtrain"), s.path("remote_dtrain"))) ssh.remote_dtrain = *v;
  if (auto v = read_choice(sink, s.get("client"), s.path("client"), {"libssh2", "openssh"})) {
    ssh.client = *v == "openssh" ? SshClient::openssh : SshClient::libssh2;
  }
  if (auto v = read_string(sink, s.get("config"), s.path("config"))) {
    ssh.config = *v;
    if (ssh.client != SshClient::openssh) {
      sink.error(*s.get("config"), s.path("config"),
                 "ssh.config is read by the system's ssh only; add ssh.client: openssh (the built-in libssh2 client "
                 "reads no ssh_config)");
    }
    refuse_unusable_ssh_config(sink, *s.get("config"), s.path("config"), ssh.config);
  }
}

// "python3 train.py --lr 0.1" → "[python3, train.py, --lr, 0.1]": the list the user meant.
std::string as_flow_list(const std::string& command) {
  std::vector<std::string> words;
  for (const std::string& word : split(command, ' ')) {
    if (!trim(word).empty()) words.emplace_back(trim(word));
  }
  return "[" + join(words, ", ") + "]";
}

void read_command(DiagnosticSink& sink, const Section& worker, std::vector<std::string>& command) {
  const YAML::Node* node = worker.get("command");
  std::string key = worker.path("command");
  if (node == nullptr) {
    if (worker.node()) sink.error(*worker.node(), key, "worker.command is missing; add command: [python3, train.py]");
    return;
  }
  if (node->IsScalar()) {
    sink.error(*node, key, single_quoted(node->Scalar()) + " is a single string, and dtrain runs no shell; write it as a list: " +
                               as_flow_list(node->Scalar()));
    return;
  }
  auto argv = read_string_list(sink, node, key, false);
  if (!argv) return;
  if (argv->empty() || (*argv)[0].empty()) {
    sink.error(*node, key, "the command is empty; write the program and its arguments: [python3, train.py]");
    return;
  }
  command = std::move(*argv);
}

// A module name as `import` takes it: dotted identifiers. The bootstrap imports each by name, so
// anything else (a path, `numpy as np`) would only fail there, in a process nobody watches.
bool is_module_name(const std::string& name) {
  if (name.empty() || name.size() > 200) return false;
  bool start = true;
  for (char c : name) {
    if (c == '.') {
      if (start) return false;
      start = true;
    } else if (std::isalpha(static_cast<unsigned char>(c)) || c == '_' || (!start && std::isdigit(static_cast<unsigned char>(c)))) {
      start = false;
    } else {
      return false;
    }
  }
  return !start;
}

void read_worker_pool(DiagnosticSink& sink, const Section& w, WorkerSettings& worker) {
  const YAML::Node* node = w.get("pool");
  if (node == nullptr) return;
  Section pool(sink, node, w.path("pool"), {"per_host", "imports"});
  if (!pool.node()) return;  // not a mapping: reported
  if (auto v = read_int(sink, pool.get("per_host"), pool.path("per_host"), 0, 64)) worker.pool_per_host = *v;
  if (const YAML::Node* imports = pool.get("imports")) {
    if (auto names = read_string_list(sink, imports, pool.path("imports"), true)) {
      for (const std::string& name : *names) {
        if (!is_module_name(name)) {
          sink.error(*imports, pool.path("imports"),
                     single_quoted(name) + " is not a module name; write names as `import` takes them: [torch, numpy]");
          return;
        }
      }
      worker.pool_imports = *names;
    }
  }
  if (worker.pool_per_host > 0 && !worker.instrument) {
    sink.error(*node, w.path("pool"),
               "the pool waits in dtrain's bootstrap, which `worker.instrument: off` turns off; remove one of them");
  }
}

void read_worker(DiagnosticSink& sink, const Section& root, const std::string& base_dir, EnvValues env_values,
                 WorkerSettings& worker) {
  const YAML::Node* node = root.get("worker");
  if (node == nullptr) {
    sink.error_at(sink.file(), 0, 0, "worker", "the spec has no worker section; add worker: {command: [python3, train.py]}");
    return;
  }
  Section w(sink, node, "worker", {"command", "workdir", "env", "pass_env", "env_file", "env_file_names", "backend", "instrument",
                                             "pool"});
  if (!w.node()) return;  // not a mapping: reported
  read_command(sink, w, worker.command);
  if (auto v = read_string(sink, w.get("workdir"), w.path("workdir"))) worker.workdir = *v;
  read_worker_env(sink, w, base_dir, env_values, worker);
  if (auto v = read_choice(sink, w.get("backend"), w.path("backend"), {"auto", "gloo", "nccl"})) {
    worker.backend = *v == "gloo" ? Backend::gloo : *v == "nccl" ? Backend::nccl : Backend::auto_select;
  }
  if (auto v = read_choice(sink, w.get("instrument"), w.path("instrument"), {"on", "off", "true", "false"})) {
    worker.instrument = *v == "on" || *v == "true";
  }
  read_worker_pool(sink, w, worker);
}

void read_parallelism(DiagnosticSink& sink, const Section& root, Parallelism& parallelism) {
  Section p(sink, root.get("parallelism"), "parallelism", {"tensor", "pipeline", "data"});
  if (auto v = read_int(sink, p.get("tensor"), p.path("tensor"), 1, kMaxCount)) parallelism.tensor = *v;
  if (auto v = read_int(sink, p.get("pipeline"), p.path("pipeline"), 1, kMaxCount)) parallelism.pipeline = *v;
  if (const YAML::Node* data = p.get("data")) {
    if (data->IsScalar() && data->Scalar() == "auto") {
      parallelism.data = 0;
    } else if (data->IsScalar() && !data->Scalar().empty() && std::isdigit(static_cast<unsigned char>(data->Scalar()[0]))) {
      if (auto v = read_int(sink, data, p.path("data"), 1, kMaxCount)) parallelism.data = *v;
    } else {
      sink.error(*data, p.path("data"), "expected a whole number of at least 1 or \"auto\", got " + describe(*data));
    }
  }
}

void read_batch(DiagnosticSink& sink, const Section& root, BatchSettings& batch) {
  Section b(sink, root.get("batch"), "batch", {"global", "micro"});
  auto global = read_int(sink, b.get("global"), b.path("global"), 1, INT_MAX);
  auto micro = read_int(sink, b.get("micro"), b.path("micro"), 1, INT_MAX);
  if (global) batch.global = *global;
  if (micro) batch.micro = *micro;
  if (global && micro && *global % *micro != 0) {
    int lower = *global / *micro * *micro;
    sink.error(*b.get("global"), b.path("global"),
               single_quoted(b.get("global")->Scalar()) + " is not a multiple of batch.micro (" + std::to_string(*micro) +
                   "); make it a multiple such as " + (lower > 0 ? std::to_string(lower) + " or " : "") +
                   std::to_string(lower + *micro));
  }
}

void read_elastic(DiagnosticSink& sink, const Section& root, int host_count, ElasticSettings& elastic) {
  Section e(sink, root.get("elastic"), "elastic", {"min_hosts", "max_restarts", "restart_window", "exclude_after",
                                                       "crash_loop_after", "progress_window", "in_place",
                                                       "in_place_timeout", "standby_per_host"});
  if (auto v = read_int(sink, e.get("min_hosts"), e.path("min_hosts"), 0, kMaxCount)) {
    if (*v > host_count && host_count > 0) {
      sink.error(*e.get("min_hosts"), e.path("min_hosts"),
                 single_quoted(std::to_string(*v)) + " is more than the " + std::to_string(host_count) +
                     " hosts the job has; make it at most " + std::to_string(host_count));
    } else {
      elastic.min_hosts = *v;
    }
  }
  if (auto v = read_int(sink, e.get("max_restarts"), e.path("max_restarts"), 0, kMaxCount)) elastic.max_restarts = *v;
  if (auto v = read_duration(sink, e.get("restart_window"), e.path("restart_window"), Millis(1))) elastic.restart_window = *v;
  if (auto v = read_int(sink, e.get("exclude_after"), e.path("exclude_after"), 1, kMaxCount)) elastic.exclude_after = *v;
  if (auto v = read_int(sink, e.get("crash_loop_after"), e.path("crash_loop_after"), 1, kMaxCount)) {
    elastic.crash_loop_after = *v;
  }
  if (auto v = read_duration_or_auto(sink, e.get("progress_window"), e.path("progress_window"), Millis(1))) {
    elastic.progress_window = *v;
  }
  if (auto v = read_choice(sink, e.get("in_place"), e.path("in_place"), {"on", "off", "true", "false"})) {
    elastic.in_place = *v == "on" || *v == "true";
  }
  if (auto v = read_duration(sink, e.get("in_place_timeout"), e.path("in_place_timeout"), Millis(1))) {
    elastic.in_place_timeout = *v;
  }
  if (auto v = read_int(sink, e.get("standby_per_host"), e.path("standby_per_host"), 0, 64)) {
    elastic.standby_per_host = *v;
  }
}

// interval < timeout < hang_timeout: an agent must miss several beats before it is declared
// lost, and a hang can only be told from a lost host if it is detected later. An auto
// hang_timeout (the default) needs no rule here: it starts at initial_hang_timeout() (> timeout)
// and, once set from the step time, declares no hang while a host is unheard
// (launcher/supervisor/hang_timeouts.h).
void read_heartbeat(DiagnosticSink& sink, const Section& root, HeartbeatSettings& heartbeat) {
  Section h(sink, root.get("heartbeat"), "heartbeat", {"interval", "timeout", "hang_timeout", "checkpoint_timeout"});
  bool ok = true;
  auto read = [&](const char* key, Millis& out) {
    if (auto v = read_duration(sink, h.get(key), h.path(key), Millis(1))) out = *v;
    else if (h.get(key) != nullptr) ok = false;
  };
  read("interval", heartbeat.interval);
  read("timeout", heartbeat.timeout);
  if (auto v = read_duration_or_auto(sink, h.get("hang_timeout"), h.path("hang_timeout"), Millis(1))) {
    heartbeat.hang_timeout = *v;
  } else if (h.get("hang_timeout") != nullptr) {
    ok = false;
  }
  read("checkpoint_timeout", heartbeat.checkpoint_timeout);
  if (!ok) return;
  const bool hang_auto = heartbeat.hang_timeout_auto();
  if (!hang_auto && heartbeat.checkpoint_timeout.count() > 0 && heartbeat.checkpoint_timeout < heartbeat.hang_timeout) {
    sink.error(*h.get("checkpoint_timeout"), h.path("checkpoint_timeout"),
               "checkpoint_timeout '" + format_duration(heartbeat.checkpoint_timeout) +
                   "' is shorter than hang_timeout '" + format_duration(heartbeat.hang_timeout) +
                   "': a rank in a checkpoint save would get less time than one training; make it at least '" +
                   format_duration(heartbeat.hang_timeout) + "' or remove it (default: 10m)");
  }
  std::string values = "interval '" + format_duration(heartbeat.interval) + "', timeout '" +
                       format_duration(heartbeat.timeout) + "', hang_timeout '" +
                       (hang_auto ? std::string("auto") : format_duration(heartbeat.hang_timeout)) + "'";
  auto report = [&](const char* preferred, const char* other, const std::string& fix) {
    const char* key = h.get(preferred) ? preferred : other;
    const YAML::Node* node = h.get(key);
    std::string message = "timeouts must nest as interval < timeout < hang_timeout, but here " + values + "; " + fix;
    if (node) sink.error(*node, h.path(key), message);
    else if (h.node()) sink.error(*h.node(), "heartbeat", message);
    else sink.error_at(sink.file(), 0, 0, "heartbeat", message);
  };
  if (heartbeat.interval >= heartbeat.timeout) {
    report("timeout", "interval", "make timeout longer than interval (several beats, e.g. '" +
                                      format_duration(heartbeat.interval * 10) + "')");
  } else if (!hang_auto && heartbeat.timeout >= heartbeat.hang_timeout) {
    report("hang_timeout", "timeout", "make hang_timeout longer than timeout (e.g. '" +
                                          format_duration(heartbeat.timeout * 6) + "'), or 'auto'");
  }
}

// checkpoint.file_mode: octal text ("0640"; YAML's unquoted 0640 reads the same). Owner read-write
// is needed to write and prune; execute bits and world write make no sense for a data file.
void read_file_mode(DiagnosticSink& sink, const YAML::Node* node, const std::string& key, int& mode) {
  auto text = read_string(sink, node, key);
  if (!text) return;
  std::optional<int> value = parse_data_file_mode(*text);
  if (!value) {
    sink.error(*node, key, single_quoted(*text) + " is not a file mode dtrain writes checkpoints with; use octal with "
                               "owner read-write, no execute bit and no write for others: \"0600\" (the default) or "
                               "\"0640\" (group may read)");
    return;
  }
  mode = *value;
}

void read_checkpoint(DiagnosticSink& sink, const Section& root, CheckpointSettings& checkpoint) {
  Section c(sink, root.get("checkpoint"), "checkpoint", {"dir", "interval_steps", "keep", "before_walltime", "file_mode"});
  if (auto v = read_string(sink, c.get("dir"), c.path("dir"))) checkpoint.dir = *v;
  if (auto v = read_int(sink, c.get("interval_steps"), c.path("interval_steps"), 0, INT_MAX)) checkpoint.interval_steps = *v;
  if (auto v = read_int(sink, c.get("keep"), c.path("keep"), 1, kMaxCount)) checkpoint.keep = *v;
  if (auto v = read_duration(sink, c.get("before_walltime"), c.path("before_walltime"), Millis(0))) {
    checkpoint.before_walltime = *v;
  }
  read_file_mode(sink, c.get("file_mode"), c.path("file_mode"), checkpoint.file_mode);
}

// metrics.listen: the one listener dtrain may open (docs/architecture.md §1), so loopback only.
void read_metrics_listen(DiagnosticSink& sink, const YAML::Node* node, const std::string& key, std::string& listen) {
  auto text = read_string(sink, node, key);
  if (!text) return;
  size_t colon = text->rfind(':');
  std::string host = colon == std::string::npos ? "" : text->substr(0, colon);
  std::string port_text = colon == std::string::npos ? "" : text->substr(colon + 1);
  int port = 0;
  auto [end, error] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (host.empty() || error != std::errc() || end != port_text.data() + port_text.size() || port < 1 || port > 65535) {
    sink.error(*node, key, single_quoted(*text) + " is not HOST:PORT; write e.g. 127.0.0.1:9400");
    return;
  }
  bool loopback = host == "localhost" || host == "[::1]" || host.rfind("127.", 0) == 0;
  if (!loopback) {
    sink.error(*node, key, single_quoted(*text) + " is not a loopback address: the metrics endpoint listens on " +
                               "loopback only (127.0.0.1, localhost or [::1]); write 127.0.0.1:" + port_text +
                               " and let a local Prometheus or node_exporter's textfile collector (metrics.textfile_dir) "
                               "carry the numbers further");
    return;
  }
  listen = *text;
}

void read_metrics(DiagnosticSink& sink, const Section& root, const std::string& base_dir, MetricsSettings& metrics) {
  Section m(sink, root.get("metrics"), "metrics", {"textfile_dir", "listen", "straggler_threshold", "interval"});
  if (auto v = read_string(sink, m.get("textfile_dir"), m.path("textfile_dir"))) {
    metrics.textfile_dir = resolve_path(base_dir, *v);  // relative to the spec, like hostfile
  }
  read_metrics_listen(sink, m.get("listen"), m.path("listen"), metrics.listen);
  if (const YAML::Node* node = m.get("straggler_threshold")) {
    std::string text = node->IsScalar() ? node->Scalar() : "";
    double value = 0;
    auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (text.empty() || error != std::errc() || end != text.data() + text.size() || !(value > 0 && value <= 1)) {
      sink.error(*node, m.path("straggler_threshold"),
                 "expected a number above 0 and at most 1 (the fastest rank's median step time over a rank's; "
                 "0.75 flags a rank a third slower than the fastest), got " +
                     (node->IsScalar() ? single_quoted(text) : describe(*node)));
    } else {
      metrics.straggler_threshold = value;
    }
  }
  if (auto v = read_duration(sink, m.get("interval"), m.path("interval"), Millis(1000))) metrics.interval = *v;
}

// logs.max_bytes: "1GiB", "512MiB", "64KiB", a number of bytes, or "unlimited" (0).
void read_logs(DiagnosticSink& sink, const Section& root, LogsSettings& logs) {
  Section l(sink, root.get("logs"), "logs", {"max_bytes"});
  const YAML::Node* node = l.get("max_bytes");
  if (node == nullptr) return;
  constexpr uint64_t kMinBytes = 4096, kMaxBytes = 1ull << 50;
  std::string text = node->IsScalar() ? node->Scalar() : "";
  if (text == "unlimited") {
    logs.max_bytes = 0;
    return;
  }
  uint64_t value = 0;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  std::string_view unit(end, static_cast<size_t>(text.data() + text.size() - end));
  if (!unit.empty() && unit.front() == ' ') unit.remove_prefix(1);
  int shift = unit.empty() || unit == "B" ? 0 : unit == "KiB" ? 10 : unit == "MiB" ? 20 : unit == "GiB" ? 30 : -1;
  bool parsed = !text.empty() && error == std::errc() && shift >= 0 && value <= (kMaxBytes >> shift);
  if (!parsed || (value << shift) < kMinBytes) {
    sink.error(*node, l.path("max_bytes"),
               "expected a size of at least 4KiB such as 512MiB, 1GiB or a number of bytes, or 'unlimited', got " +
                   (node->IsScalar() ? single_quoted(text) : describe(*node)) +
                   "; a rank log past it is rotated to <rank>.log.1");
    return;
  }
  logs.max_bytes = value << shift;
}

// scale: a relay tree carries the agents of SSH hosts (srun and kubectl reach every host flat).
void read_scale(DiagnosticSink& sink, const Section& root, TransportKind transport, ScaleSettings& scale) {
  Section s(sink, root.get("scale"), "scale", {"tree", "fanout"});
  if (auto v = read_choice(sink, s.get("tree"), s.path("tree"), {"auto", "on", "off"})) {
    scale.tree = *v == "on" ? RelayTreeMode::on : *v == "off" ? RelayTreeMode::off : RelayTreeMode::auto_select;
    if (scale.tree == RelayTreeMode::on && (transport == TransportKind::srun || transport == TransportKind::kubectl)) {
      sink.error(*s.get("tree"), s.path("tree"),
                 std::string("a relay tree reaches hosts over SSH, and this job's transport is ") +
                     (transport == TransportKind::srun ? "srun (Slurm's own step launch is a tree already)"
                                                       : "kubectl (every pod is reached with kubectl exec)") +
                     "; remove scale.tree or set it to auto");
    }
  }
  if (auto v = read_int(sink, s.get("fanout"), s.path("fanout"), 2, kMaxCount)) scale.fanout = *v;
}

}  // namespace

void read_spec_body(DiagnosticSink& sink, const YAML::Node& root_node, const std::string& base_dir, JobSpec& spec,
                    EnvValues env_values) {
  Section root(sink, &root_node, "",
               {"version", "name", "tenant", "hosts", "hostfile", "include", "exclude", "slots_per_host", "spares",
                "ssh", "transport", "worker", "parallelism", "batch", "elastic", "heartbeat", "checkpoint", "metrics", "logs",
                "scale", "stop_grace", "preempt_grace", "intent", "consistency", "health", "kubernetes"});
  read_label(sink, root.get("name"), "name", spec.name);
  read_label(sink, root.get("tenant"), "tenant", spec.tenant);
  if (auto v = read_int(sink, root.get("slots_per_host"), "slots_per_host", 1, kMaxCount)) spec.slots_per_host = *v;
  read_hosts(sink, root, base_dir, spec);
  read_ssh(sink, root, spec.ssh);
  read_worker(sink, root, base_dir, env_values, spec.worker);
  read_parallelism(sink, root, spec.parallelism);
  read_batch(sink, root, spec.batch);
  read_elastic(sink, root, static_cast<int>(spec.hosts.size()), spec.elastic);
  if (spec.worker.pool_per_host > 0 && spec.elastic.standby_per_host > 0) {
    // One pool per agent: its processes wait either in the script (Worker.from_env) or in the
    // bootstrap, and an agent could not tell which one a join-live rank wants.
    sink.error(*root.get("elastic"), "elastic.standby_per_host",
               "cannot be used with worker.pool (one pool per host: standby_per_host for scripts that call "
               "Worker.from_env, worker.pool for unmodified ones); remove one of them");
  }
  read_heartbeat(sink, root, spec.heartbeat);
  read_checkpoint(sink, root, spec.checkpoint);
  read_metrics(sink, root, base_dir, spec.metrics);
  read_logs(sink, root, spec.logs);
  read_scale(sink, root, spec.transport, spec.scale);
  read_intent(sink, root, spec.elastic, spec.intent);
  read_health(sink, root, spec.health);
  if (auto v = read_duration(sink, root.get("stop_grace"), "stop_grace", Millis(0))) spec.stop_grace = *v;
  if (auto v = read_duration(sink, root.get("preempt_grace"), "preempt_grace", Millis(1000))) spec.preempt_grace = *v;
  if (auto v = read_choice(sink, root.get("consistency"), "consistency", {"strict", "warn", "off"})) {
    spec.consistency = *v == "warn" ? Consistency::warn : *v == "off" ? Consistency::off : Consistency::strict;
  }

}

}  // namespace dtrain::spec
