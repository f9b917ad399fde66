#include "launcher/hosts/kubernetes_hosts.h"

#include "launcher/base/child_process.h"
#include "launcher/base/strings.h"

namespace dtrain::hosts {

transport::KubectlOptions kubectl_options_for(const spec::JobSpec& job) {
  transport::KubectlOptions options;
  options.kubectl = job.kubernetes.kubectl;
  options.kubeconfig = job.kubernetes.kubeconfig;
  options.context = job.kubernetes.context;
  options.namespace_name = job.kubernetes.namespace_name;
  options.container = job.kubernetes.container;
  // The API server, the kubelet and the agent's own start: well past a heartbeat timeout.
  options.start_timeout_ms = static_cast<int>(std::max<int64_t>(60'000, 3 * job.heartbeat.timeout.count()));
  return options;
}

std::string dtrain_path_in_pods(const spec::JobSpec& job) { return job.ssh.remote_dtrain; }

Result<spec::PodList> list_pods(const spec::JobSpec& job, const std::string& selector, Millis timeout) {
  transport::KubectlOptions options = kubectl_options_for(job);
  std::vector<std::string> rest{"get", "pods"};
  if (!selector.empty()) rest.insert(rest.end(), {"-l", selector});
  rest.insert(rest.end(), {"-o", "json"});
  spec::KubernetesSettings source = job.kubernetes;
  source.selector = selector;
  const std::string what = "kubectl get pods (" + spec::describe_pod_source(source) + ")";
  Result<CommandOutput> output = run_command(transport::kubectl_argv(options, rest), timeout);
  if (!output) {
    return Error::user(what + ": " + output.error().message +
                       "; install kubectl (or set kubernetes.kubectl to its path) and check that the cluster answers");
  }
  if (output->exit_code != 0) return Error::user(transport::explain_kubectl_failure(what, output->err, options));
  Result<spec::PodList> pods = spec::parse_pod_list(output->out);
  if (!pods) return Error::user(what + " printed something that is not a pod list: " + pods.error().message);
  return pods;
}

Result<std::vector<std::string>> take_pods_as_hosts(spec::JobSpec& job, Millis timeout) {
  return take_pods_as_hosts(job, job.kubernetes.selector, timeout);
}

Result<std::vector<std::string>> take_pods_as_hosts(spec::JobSpec& job, const std::string& selector, Millis timeout) {
  Result<spec::PodList> pods = list_pods(job, selector, timeout);
  if (!pods) return pods.error();
  if (job.kubernetes.container.empty()) {
    for (const spec::Pod& pod : pods->pods) {
      if (spec::pod_unusable_reason(pod).empty() && !pod.containers.empty()) {
        job.kubernetes.container = pod.containers.front().name;
        break;
      }
    }
  }
  Result<spec::KubernetesHosts> hosts = spec::hosts_from_pods(*pods, job.kubernetes, job.slots_per_host);
  if (!hosts) return hosts.error();
  job.hosts = std::move(hosts->hosts);
  job.spares = std::move(hosts->spares);
  return std::move(hosts->left_out);
}

}  // namespace dtrain::hosts
