// The kubernetes: block (`hosts: kubernetes`, `transport: kubectl`): where the pods come from and
// how kubectl reaches them. The pods themselves are found at submit (launcher/hosts), never here:
// `dtrain validate` must work on a laptop without a cluster.

#include <algorithm>

#include "launcher/spec/spec_hosts.h"

namespace dtrain::spec {
namespace {

// A DNS-1123 label: what Kubernetes accepts as a namespace or container name.
bool is_dns_label(const std::string& text) {
  if (text.empty() || text.size() > 63) return false;
  auto allowed = [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-'; };
  return std::all_of(text.begin(), text.end(), allowed) && text.front() != '-' && text.back() != '-';
}

void read_dns_label(DiagnosticSink& sink, const Section& section, const std::string& key, const std::string& what,
                    std::string& out) {
  auto value = read_string(sink, section.get(key), section.path(key));
  if (!value) return;
  if (!is_dns_label(*value)) {
    sink.error(*section.get(key), section.path(key),
               single_quoted(*value) + " is not a Kubernetes " + what +
                   " name; use at most 63 lower-case letters, digits and '-', starting and ending with a letter or digit");
    return;
  }
  out = *value;
}

// A label selector is passed to kubectl as one argument (no shell), so only what would corrupt
// a message or a log line is refused here; kubectl reports its grammar errors itself.
void read_selector(DiagnosticSink& sink, const Section& section, std::string& out) {
  auto value = read_string(sink, section.get("selector"), section.path("selector"));
  if (!value) return;
  bool printable = std::all_of(value->begin(), value->end(), [](char c) { return c >= ' ' && c != '\x7f'; });
  if (value->empty() || value->size() > 1024 || !printable || value->find_first_not_of(' ') == std::string::npos) {
    sink.error(*section.get("selector"), section.path("selector"),
               "expected a label selector such as 'app=trainer' or 'job-name=llm,tier!=spare', got " +
                   single_quoted(*value));
    return;
  }
  out = *value;
}

void read_node_selector(DiagnosticSink& sink, const Section& job, std::map<std::string, std::string>& out) {
  const YAML::Node* node = job.get("node_selector");
  if (node == nullptr) return;
  if (!node->IsMap()) {
    sink.error(*node, job.path("node_selector"),
               "expected a mapping of label: value such as {nvidia.com/gpu.product: H100}, got " + describe(*node));
    return;
  }
  for (auto it = node->begin(); it != node->end(); ++it) {
    YAML::Node label = it->first, value = it->second;
    std::string name = label.IsScalar() ? label.Scalar() : describe(label);
    if (!label.IsScalar() || name.empty() || !value.IsScalar()) {
      sink.error(value, job.path("node_selector") + "." + name, "expected a label name and a string value");
      continue;
    }
    out[name] = value.Scalar();
  }
}

void read_tolerations(DiagnosticSink& sink, const Section& job, KubernetesJobTemplate& out) {
  Section tolerations(sink, job.get("tolerations"), job.path("tolerations"), {"not_ready", "unreachable"});
  if (auto v = read_duration(sink, tolerations.get("not_ready"), tolerations.path("not_ready"), Millis(0))) {
    out.not_ready_toleration = *v;
  }
  if (auto v = read_duration(sink, tolerations.get("unreachable"), tolerations.path("unreachable"), Millis(0))) {
    out.unreachable_toleration = *v;
  }
}

std::optional<KubernetesJobTemplate> read_job_template(DiagnosticSink& sink, const Section& block) {
  Section job(sink, block.get("job"), block.path("job"),
              {"kind", "image", "pods", "gpus_per_pod", "node_selector", "tolerations", "command"});
  if (job.node() == nullptr) return std::nullopt;
  KubernetesJobTemplate result;
  // Which the cluster has is known only at submit (launcher/hosts): `dtrain validate` needs none.
  if (auto v = read_choice(sink, job.get("kind"), job.path("kind"), {"auto", "job", "jobset"})) {
    result.kind = *v == "job" ? KubernetesJobKind::job : *v == "jobset" ? KubernetesJobKind::jobset
                                                                        : KubernetesJobKind::automatic;
  }
  if (auto v = read_string(sink, job.get("image"), job.path("image"))) result.image = *v;
  if (job.get("image") == nullptr) {
    sink.error(*job.node(), job.path("image"),
               "kubernetes.job needs the image its pods run (one that holds dtrain at ssh.remote_dtrain or the same "
               "path as here); add image: registry.example.com/trainer:1.0");
  }
  if (auto v = read_int(sink, job.get("pods"), job.path("pods"), 1, 10'000)) result.pods = *v;
  if (job.get("pods") == nullptr) {
    sink.error(*job.node(), job.path("pods"), "kubernetes.job needs the number of pods (hosts and spares); add pods: 4");
  }
  if (auto v = read_int(sink, job.get("gpus_per_pod"), job.path("gpus_per_pod"), 0, 1024)) result.gpus_per_pod = *v;
  read_node_selector(sink, job, result.node_selector);
  read_tolerations(sink, job, result);
  if (auto v = read_string_list(sink, job.get("command"), job.path("command"), false)) {
    if (v->empty()) {
      sink.error(*job.get("command"), job.path("command"), "the slot holder's command is empty; leave it out for [sleep, infinity]");
    } else {
      result.command = *v;
    }
  }
  return result;
}

}  // namespace

void read_kubernetes(DiagnosticSink& sink, const Section& root, const std::string& base_dir, bool from_kubernetes,
                     JobSpec& spec) {
  Section block(sink, root.get("kubernetes"), "kubernetes",
                {"namespace", "selector", "job", "container", "context", "kubeconfig", "kubectl", "spares",
                 "pod_timeout"});
  const bool kubectl_transport = spec.transport == TransportKind::kubectl;
  if (block.node() != nullptr && !from_kubernetes && !kubectl_transport) {
    sink.error(*block.node(), "kubernetes",
               "the kubernetes: block is read only with hosts: kubernetes (or transport: kubectl); set hosts: kubernetes "
               "or remove the block");
    return;
  }
  if (!from_kubernetes && !kubectl_transport) return;
  KubernetesSettings& kube = spec.kubernetes;
  kube.enabled = true;
  read_dns_label(sink, block, "namespace", "namespace", kube.namespace_name);
  read_dns_label(sink, block, "container", "container", kube.container);
  read_selector(sink, block, kube.selector);
  kube.job = read_job_template(sink, block);
  if (auto v = read_string(sink, block.get("context"), block.path("context"))) kube.context = *v;
  if (auto v = read_string(sink, block.get("kubeconfig"), block.path("kubeconfig"))) {
    kube.kubeconfig = resolve_path(base_dir, *v);
  }
  if (auto v = read_string(sink, block.get("kubectl"), block.path("kubectl"))) {
    if (v->empty()) sink.error(*block.get("kubectl"), block.path("kubectl"), "empty; leave it out for kubectl from PATH");
    else kube.kubectl = *v;
  }
  if (auto v = read_int(sink, block.get("spares"), block.path("spares"), 0, 10'000)) kube.spares = *v;
  if (auto v = read_duration(sink, block.get("pod_timeout"), block.path("pod_timeout"), Millis(1000))) kube.pod_timeout = *v;

  if (!from_kubernetes) {  // transport: kubectl with the pods listed as hosts (a resolved spec.yaml)
    if (kube.job && block.get("job") != nullptr) {
      sink.error(*block.get("job"), block.path("job"),
                 "kubernetes.job creates pods, but hosts lists them already; use hosts: kubernetes with job, or "
                 "remove job");
    }
    return;
  }
  if (block.node() == nullptr) {
    sink.error(*root.get("hosts"), "hosts",
               "hosts: kubernetes needs a kubernetes: block naming the pods: {namespace: ml, selector: app=trainer} "
               "for pods that exist, or {job: {image: ..., pods: 4}} for pods dtrain creates");
    return;
  }
  if (!kube.selector.empty() && kube.job) {
    sink.error(*block.get("job"), block.path("job"),
               "selector and job are both set; use selector for pods that exist, or job for pods dtrain creates");
  } else if (kube.selector.empty() && !kube.job && block.get("selector") == nullptr) {
    sink.error(*block.node(), "kubernetes",
               "say which pods: selector: app=trainer (pods that exist) or job: {image: ..., pods: 4} (pods dtrain "
               "creates)");
  }
  if (kube.job && kube.spares >= kube.job->pods && kube.job->pods > 0) {
    sink.error(*block.get("spares"), block.path("spares"),
               std::to_string(kube.spares) + " spares leave none of the job's " + std::to_string(kube.job->pods) +
                   " pods to train on; raise kubernetes.job.pods or lower spares");
  }
}

}  // namespace dtrain::spec
