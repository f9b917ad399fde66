#pragma once
// `hosts: kubernetes` seen from this machine: the spec's kubernetes: block as kubectl options, and
// the pods that become the run's hosts (`kubectl get pods -l SELECTOR -o json`, typed by
// launcher/spec/kubernetes_pods.h). Used by submit (before the plan), `dtrain hosts` and the
// driver's transports; the one mapping from the spec to kubectl, as ssh_options_for is for ssh.

#include <string>
#include <vector>

#include "launcher/base/duration.h"
#include "launcher/base/result.h"
#include "launcher/spec/job_spec.h"
#include "launcher/spec/kubernetes_pods.h"
#include "launcher/transport/kubectl_transport.h"

namespace dtrain::hosts {

/// The spec's kubernetes: block as kubectl options (kubeconfig, context, namespace, container).
transport::KubectlOptions kubectl_options_for(const spec::JobSpec& job);

/// The dtrain binary inside the pods: ssh.remote_dtrain (the image, or a volume, holds it there);
/// empty: this binary, which the kubectl transport copies into each pod that lacks it (as the SSH
/// transport does on hosts; kubectl_provision.h).
std::string dtrain_path_in_pods(const spec::JobSpec& job);

/// `kubectl get pods [-l SELECTOR] -o json` in the spec's namespace, typed. Errors (user kind)
/// name the namespace and selector and the fix: kubectl missing, a refused permission, output
/// that is not a pod list.
Result<spec::PodList> list_pods(const spec::JobSpec& job, const std::string& selector, Millis timeout);

/// Fills job.hosts and job.spares from the pods (spec::hosts_from_pods), and kubernetes.container
/// with the first pod's first container when the spec names none (so that every exec and
/// spec.yaml say which). Returns the pods left out, each with why, for a warning.
Result<std::vector<std::string>> take_pods_as_hosts(spec::JobSpec& job, Millis timeout);
/// The same with the pods of `selector` (kubernetes.job: the run's own, CreatedJob's names).
Result<std::vector<std::string>> take_pods_as_hosts(spec::JobSpec& job, const std::string& selector, Millis timeout);

}  // namespace dtrain::hosts
