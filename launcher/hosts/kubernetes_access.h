#pragma once
// `hosts: kubernetes`: may the kubeconfig's user do what dtrain does in the namespace? Each
// permission dtrain needs is asked of the API server with `kubectl auth can-i` (a
// SelfSubjectAccessReview, authoritative whatever the authorizer), and whether the JobSet CRD
// is installed is read from discovery (`kubectl api-resources`, readable by any user, unlike the
// CRD objects). Used by `dtrain hosts`; kubectl's answers are untrusted and typed here, by the
// pure read_* functions, before anything decides on them.

#include <string>
#include <vector>

#include "launcher/base/duration.h"
#include "launcher/base/result.h"
#include "launcher/hosts/kubernetes_job.h"
#include "launcher/spec/job_spec.h"

namespace dtrain::hosts {

/// One thing dtrain does with the API server: `verb` on `resource` (plural, with its API group
/// as kubectl spells it: "pods", "jobs.batch") and maybe a subresource ("exec").
struct KubernetesPermission {
  std::string verb;
  std::string resource;
  std::string subresource;
  std::string needed_for;  ///< what dtrain does with it, in words
  bool operator==(const KubernetesPermission&) const = default;
};

/// What dtrain needs in the spec's namespace: get, list and watch on pods and create on
/// pods/exec always; with kubernetes.job (dtrain creates the pods), create and delete on what
/// it `creates`: jobs.batch and services, or jobsets.jobset.x-k8s.io.
std::vector<KubernetesPermission> permissions_needed(const spec::KubernetesSettings& kube,
                                                     events::KubernetesKind creates = events::KubernetesKind::job);

/// "create on pods/exec".
std::string describe(const KubernetesPermission& permission);

/// kubectl's arguments after the global ones: `auth can-i VERB RESOURCE [--subresource=SUB]`.
/// Never `pods/exec` as the resource: kubectl reads that as the pod named "exec".
std::vector<std::string> can_i_arguments(const KubernetesPermission& permission);

enum class AccessAnswer { allowed, denied, unknown };

/// kubectl auth can-i's verdict.
struct AccessVerdict {
  AccessAnswer answer = AccessAnswer::unknown;
  std::string detail;  ///< the server's reason for a "no"; for unknown, what kubectl said instead
  bool operator==(const AccessVerdict&) const = default;
};

/// Reads `kubectl auth can-i` from its exit code and output: "yes" (exit 0) is allowed, "no" or
/// "no - REASON" (exit 1) denied, anything else (an error: no such context, unreachable
/// server) unknown, with what kubectl printed on stderr.
AccessVerdict read_can_i(int exit_code, const std::string& out, const std::string& err);

/// The JobSet CRD (kJobSetResource, kubernetes_job.h): installed, absent, or unknown (discovery failed).
enum class CrdState { installed, absent, unknown };

/// kubectl's arguments after the global ones: `api-resources --api-group=jobset.x-k8s.io -o name`.
std::vector<std::string> jobset_discovery_arguments();

/// Reads `kubectl api-resources --api-group=jobset.x-k8s.io -o name`: installed when a line is
/// jobsets.jobset.x-k8s.io (even if another group's discovery failed, exit 1), absent when it
/// succeeded without one, unknown otherwise.
CrdState read_jobset_discovery(int exit_code, const std::string& out);

std::string to_string(AccessAnswer answer);  ///< "ok", "MISSING", "unknown"
std::string to_string(CrdState state);       ///< "installed", "not installed", "unknown"

/// One permission as the API server answered.
struct AccessCheck {
  KubernetesPermission permission;
  AccessVerdict verdict;
};

/// Where the checks went, for messages: "namespace 'ml' of context 'prod'".
std::string describe_namespace(const spec::KubernetesSettings& kube);

/// The line that names a denied permission and the fix.
std::string missing_permission_message(const KubernetesPermission& permission, const spec::KubernetesSettings& kube);

/// Asks each of permissions_needed(kube, creates) with kubectl, one call each (`timeout` per
/// call). An Error (user kind) when kubectl cannot answer at all: missing, a wrong kubeconfig or
/// context, an unreachable server (the first call's failure, explained, and no more calls).
Result<std::vector<AccessCheck>> check_access(const spec::JobSpec& job, Millis timeout,
                                              events::KubernetesKind creates = events::KubernetesKind::job);

/// Whether the JobSet CRD is installed (kubernetes.job.kind auto and jobset depend on it).
/// `detail` receives kubectl's words when the answer is unknown.
CrdState check_jobset_crd(const spec::JobSpec& job, Millis timeout, std::string& detail);

/// What kubernetes.job creates, as kubernetes.job.kind and the cluster decide.
struct JobKindChoice {
  events::KubernetesKind kind = events::KubernetesKind::job;
  std::string warning;  ///< "" unless discovery could not answer: then what was assumed, and why
  bool operator==(const JobKindChoice&) const = default;
};

/// kind job: a Job. kind jobset: a JobSet, or where `crd` is absent an Error (user kind) naming
/// the namespace and context and the fix (install JobSet, or kind job). kind auto: a JobSet
/// where `crd` is installed, else a Job. Where `crd` is unknown (`detail`: kubectl's words),
/// jobset goes on as a JobSet and auto as a Job, each with a warning. Pure.
Result<JobKindChoice> choose_job_kind(const spec::KubernetesSettings& kube, CrdState crd, const std::string& detail);

/// choose_job_kind on check_jobset_crd's answer; kind job asks the cluster nothing.
Result<JobKindChoice> resolve_job_kind(const spec::JobSpec& job, Millis timeout);

}  // namespace dtrain::hosts
