#include "launcher/spec/spec_hosts.h"

#include <algorithm>
#include <set>
#include <unordered_map>

#include "launcher/base/strings.h"
#include "launcher/spec/hostlist.h"
#include "launcher/spec/slurm_allocation.h"

namespace dtrain::spec {
namespace {

// A host with the place it was written, so that a duplicate can be pointed at.
struct ListedHost {
  HostEntry entry;
  Diagnostic where;
};

std::optional<std::vector<int>> read_slot_list(DiagnosticSink& sink, const YAML::Node* node, const std::string& key) {
  if (node == nullptr) return std::nullopt;
  if (!node->IsSequence() || node->size() == 0) {
    sink.error(*node, key, "expected a list of local slot numbers such as [0, 2], got " + describe(*node));
    return std::nullopt;
  }
  std::vector<int> slots;
  for (size_t i = 0; i < node->size(); ++i) {
    YAML::Node item = (*node)[i];
    auto slot = read_int(sink, &item, key + "[" + std::to_string(i) + "]", 0, 1 << 20);
    if (!slot) return std::nullopt;
    if (std::find(slots.begin(), slots.end(), *slot) != slots.end()) {
      sink.error(item, key + "[" + std::to_string(i) + "]", "slot " + std::to_string(*slot) + " is listed twice");
      return std::nullopt;
    }
    slots.push_back(*slot);
  }
  std::sort(slots.begin(), slots.end());
  return slots;
}

// `{name: gpu[01-02], user: alice, port: 2222, slots: 8, only_slots: [0, 2]}`
void read_host_mapping(DiagnosticSink& sink, const YAML::Node& item, const std::string& key,
                       std::vector<ListedHost>& out) {
  Section host(sink, &item, key, {"name", "user", "port", "slots", "only_slots", "address"});
  HostEntry base;
  bool ok = true;
  if (auto address = read_string(sink, host.get("address"), host.path("address"))) base.address = *address;
  if (auto user = read_string(sink, host.get("user"), host.path("user"))) base.user = *user;
  if (auto port = read_int(sink, host.get("port"), host.path("port"), 1, 65535)) base.port = *port;
  else ok = ok && host.get("port") == nullptr;
  if (auto slots = read_int(sink, host.get("slots"), host.path("slots"), 1, 1 << 20)) base.slots = *slots;
  else ok = ok && host.get("slots") == nullptr;
  if (auto only = read_slot_list(sink, host.get("only_slots"), host.path("only_slots"))) {
    if (base.slots != 0 && base.slots != static_cast<int>(only->size())) {
      sink.error(*host.get("slots"), host.path("slots"),
                 "slots is " + std::to_string(base.slots) + " but only_slots lists " +
                     std::to_string(only->size()) + "; drop slots or make them agree");
      ok = false;
    }
    base.slots = static_cast<int>(only->size());
    base.only_slots = std::move(*only);
  } else {
    ok = ok && host.get("only_slots") == nullptr;
  }
  const YAML::Node* name = host.get("name");
  if (name == nullptr) {
    sink.error(item, key, "a host mapping needs a name: {name: gpu01, slots: 8}");
    return;
  }
  auto text = read_string(sink, name, host.path("name"));
  if (!text) return;
  auto names = expand_hostlist(*text);
  if (!names) {
    sink.error(*name, host.path("name"), names.error().message);
    return;
  }
  if (!ok) return;
  for (const std::string& expanded : *names) {
    HostEntry entry = base;
    entry.name = expanded;
    out.push_back({std::move(entry), sink.locate(*name, host.path("name"))});
  }
}

// `hosts` or `spares`: a list of host expressions and mappings (or one expression).
void read_host_list(DiagnosticSink& sink, const YAML::Node& node, const std::string& key,
                    std::vector<ListedHost>& out) {
  auto read_expression = [&](const YAML::Node& item, const std::string& item_key) {
    auto entries = parse_host_expression(item.Scalar());
    if (!entries) {
      sink.error(item, item_key, entries.error().message);
      return;
    }
    for (HostEntry& entry : *entries) out.push_back({std::move(entry), sink.locate(item, item_key)});
  };
  if (node.IsScalar()) {
    read_expression(node, key);
    return;
  }
  if (!node.IsSequence()) {
    sink.error(node, key, "expected a list of hosts such as [gpu[01-04], alice@gpu05:2222], got " + describe(node));
    return;
  }
  if (node.size() == 0) {
    sink.error(node, key, "the list is empty; name at least one host, or remove '" + key + "'" +
                              (key == "hosts" ? " to run on localhost" : ""));
    return;
  }
  for (size_t i = 0; i < node.size(); ++i) {
    YAML::Node item = node[i];
    std::string item_key = key + "[" + std::to_string(i) + "]";
    if (item.IsScalar()) read_expression(item, item_key);
    else if (item.IsMap()) read_host_mapping(sink, item, item_key, out);
    else sink.error(item, item_key, "expected a host such as gpu01 or {name: gpu01, slots: 8}, got " + describe(item));
  }
}

void read_hostfile_hosts(DiagnosticSink& sink, const YAML::Node& node, const std::string& base_dir,
                         std::vector<ListedHost>& out) {
  auto path = read_string(sink, &node, "hostfile");
  if (!path) return;
  std::string resolved = resolve_path(base_dir, *path);
  auto text = read_text_file(resolved);
  if (!text) {
    sink.error(node, "hostfile", text.error().message + "; the path is relative to the spec file");
    return;
  }
  std::vector<LineProblem> problems;
  std::vector<int> lines;
  std::vector<HostEntry> hosts = read_hostfile(*text, problems, &lines);
  for (LineProblem& problem : problems) {
    sink.error_at(resolved, problem.line, problem.column, "hostfile", std::move(problem.message));
  }
  if (problems.empty() && hosts.empty()) {
    sink.error(node, "hostfile", single_quoted(resolved) + " lists no hosts; write one per line: 'worker-1 slots=4'");
  }
  for (size_t i = 0; i < hosts.size(); ++i) {
    out.push_back({std::move(hosts[i]), {resolved, lines[i], 1, "hostfile", ""}});
  }
}

std::string place(const Diagnostic& where) {
  std::string text = where.file;
  if (where.line > 0) text += ":" + std::to_string(where.line) + ":" + std::to_string(where.column);
  return text;
}

// Reports a name listed twice; keeps the first.
std::vector<HostEntry> without_duplicates(DiagnosticSink& sink, std::vector<ListedHost>& listed,
                                          std::vector<ListedHost>& seen) {
  std::vector<HostEntry> hosts;
  // An index by name: a linear search made the maximum hostlist (65536 names) take the loader
  // about 10 s (found by fuzz/spec_loader).
  std::unordered_map<std::string, size_t> index;
  for (size_t i = 0; i < seen.size(); ++i) index.emplace(seen[i].entry.name, i);
  for (ListedHost& host : listed) {
    auto first = index.find(host.entry.name);
    if (first != index.end()) {
      Diagnostic diagnostic = host.where;
      diagnostic.message = "host " + single_quoted(host.entry.name) + " is listed twice (first at " +
                           place(seen[first->second].where) + "); list each host once";
      sink.error_at(diagnostic.file, diagnostic.line, diagnostic.column, diagnostic.key, diagnostic.message);
      continue;
    }
    index.emplace(host.entry.name, seen.size());
    seen.push_back(host);
    hosts.push_back(host.entry);
  }
  return hosts;
}

}  // namespace

void read_hosts(DiagnosticSink& sink, const Section& root, const std::string& base_dir, JobSpec& spec) {
  const YAML::Node* hosts_node = root.get("hosts");
  const YAML::Node* hostfile_node = root.get("hostfile");
  std::vector<ListedHost> listed;
  // `hosts: slurm` (the scalar; a host named slurm is `hosts: [slurm]`): the allocation's nodes.
  const bool from_slurm = hosts_node != nullptr && hosts_node->IsScalar() && hosts_node->Scalar() == "slurm";
  // `hosts: kubernetes`: pods, found at submit (kubernetes_hosts.h), so none are listed here.
  const bool from_kubernetes = hosts_node != nullptr && hosts_node->IsScalar() && hosts_node->Scalar() == "kubernetes";
  if (from_kubernetes) {
    for (const char* key : {"hostfile", "include", "exclude", "spares"}) {
      if (const YAML::Node* node = root.get(key)) {
        sink.error(*node, key,
                   std::string("hosts: kubernetes takes its hosts from pods; choose them with kubernetes.selector") +
                       (std::string(key) == "spares" ? " and set kubernetes.spares" : "") + ", and remove " + key);
      }
    }
  } else if (from_slurm) {
    int slots_per_host = root.get("slots_per_host") != nullptr ? spec.slots_per_host : 0;
    Result<SlurmAllocation> allocation = read_slurm_allocation(process_environment(), slots_per_host);
    if (!allocation) {
      sink.error(*hosts_node, "hosts", allocation.error().message);
    } else {
      for (HostEntry& host : allocation->hosts) {
        listed.push_back({std::move(host), sink.locate(*hosts_node, "hosts")});
      }
    }
    if (hostfile_node != nullptr) {
      sink.error(*hostfile_node, "hostfile", "hosts and hostfile are both set; use one of them");
    }
  } else if (hosts_node != nullptr) {
    read_host_list(sink, *hosts_node, "hosts", listed);
    if (hostfile_node != nullptr) {
      sink.error(*hostfile_node, "hostfile", "hosts and hostfile are both set; use one of them");
    }
  } else if (hostfile_node != nullptr) {
    read_hostfile_hosts(sink, *hostfile_node, base_dir, listed);
  } else {
    // The embedded default: run on this machine, no sshd needed.
    HostEntry localhost;
    localhost.name = "localhost";
    listed.push_back({std::move(localhost), {}});
  }
  std::vector<ListedHost> seen;
  std::vector<HostEntry> hosts = without_duplicates(sink, listed, seen);
  for (HostEntry& host : hosts) {
    if (host.slots == 0) host.slots = spec.slots_per_host;
  }

  const YAML::Node* include = root.get("include");
  const YAML::Node* exclude = root.get("exclude");
  auto include_text = read_string(sink, include, "include");
  auto exclude_text = read_string(sink, exclude, "exclude");
  if (include_text && exclude_text) {
    sink.error(*exclude, "exclude", "include and exclude are both set; use one of them");
  } else if ((include_text || exclude_text) && !hosts.empty()) {
    bool including = include_text.has_value();
    const std::string& filter = including ? *include_text : *exclude_text;
    auto filtered = apply_include_exclude(hosts, including ? filter : "", including ? "" : filter);
    if (filtered) {
      hosts = std::move(*filtered);
    } else {
      // apply_include_exclude prefixes "include: "; the key already says so.
      std::string message = filtered.error().message;
      std::string prefix = including ? "include: " : "exclude: ";
      if (starts_with(message, prefix)) message = message.substr(prefix.size());
      sink.error(including ? *include : *exclude, including ? "include" : "exclude", message);
    }
  }
  spec.hosts = std::move(hosts);

  if (auto transport = read_choice(sink, root.get("transport"), "transport", {"auto", "ssh", "srun", "kubectl"})) {
    spec.transport = *transport == "srun"      ? TransportKind::srun
                     : *transport == "ssh"     ? TransportKind::ssh
                     : *transport == "kubectl" ? TransportKind::kubectl
                                               : TransportKind::auto_select;
  }
  if (from_slurm && spec.transport == TransportKind::auto_select) spec.transport = TransportKind::srun;
  if (from_kubernetes && spec.transport == TransportKind::auto_select) spec.transport = TransportKind::kubectl;
  if (from_kubernetes && spec.transport != TransportKind::kubectl) {
    sink.error(*root.get("transport"), "transport",
               "hosts: kubernetes reaches its pods with kubectl exec; remove transport: or set it to kubectl");
  }
  read_kubernetes(sink, root, base_dir, from_kubernetes, spec);
  if (spec.transport == TransportKind::srun && !in_slurm_allocation(process_environment())) {
    sink.error(root.get("transport") != nullptr ? *root.get("transport") : *hosts_node, "transport",
               "transport: srun starts the agents as a Slurm job step, but this is not inside a Slurm "
               "allocation (SLURM_JOB_ID is not set); run dtrain in an salloc shell or an sbatch script, "
               "or use transport: ssh");
  }

  const YAML::Node* spares_node = from_kubernetes ? nullptr : root.get("spares");  // reported above
  if (spares_node != nullptr) {
    std::vector<ListedHost> spares;
    read_host_list(sink, *spares_node, "spares", spares);
    spec.spares = without_duplicates(sink, spares, seen);
    for (HostEntry& spare : spec.spares) {
      spare.spare = true;
      if (spare.slots == 0) spare.slots = spec.slots_per_host;
    }
  }
}

}  // namespace dtrain::spec
