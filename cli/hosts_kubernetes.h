#pragma once
// `dtrain hosts SPEC` for `hosts: kubernetes`: instead of reaching hosts over ssh, it asks the
// API server (through kubectl, as a run would) whether the kubeconfig's user has each permission
// dtrain needs in the namespace (launcher/hosts/kubernetes_access.h), whether the JobSet CRD is
// installed (informational), and which pods the selector finds: each one's node, IP and slots,
// and whether it would be a host, a spare, or left out and why (with transport: kubectl and the
// pods named as hosts, as in a run's spec.yaml: those pods, each found and usable). Exit 0 when the job can start;
// 3 (infra) with each missing permission, its namespace and the fix, or with why no pod can be a
// host, or when kubectl cannot answer at all (missing, a wrong kubeconfig or context).

#include <string>

#include "launcher/spec/job_spec.h"

namespace dtrain::cli {

/// The preflight of a `hosts: kubernetes` spec; prints a table (or JSON) and returns the exit code.
int check_kubernetes_hosts(const spec::JobSpec& job, const std::string& spec_path, bool json);

}  // namespace dtrain::cli
