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
/// pods/exec always; with kubernetes.job (dtrain creates the pods), create and delete on
/// jobs.batch and services too.
std::vector<KubernetesPermission> permissions_needed(const spec::KubernetesSettings& kube);

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

/// The JobSet CRD (jobsets.jobset.x-k8s.io): installed, absent, or unknown (discovery failed).
inline constexpr const char* kJobSetResource = "jobsets.jobset.x-k8s.io";
inline constexpr const char* kJobSetGroup = "jobset.x-k8s.io";

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

/// Asks each of permissions_needed(kube) with kubectl, one call each (`timeout` per call).
/// An Error (user kind) when kubectl cannot answer at all: missing, a wrong kubeconfig or
/// context, an unreachable server (the first call's failure, explained, and no more calls).
Result<std::vector<AccessCheck>> check_access(const spec::JobSpec& job, Millis timeout);

/// Whether the JobSet CRD is installed (informational: dtrain does not need it). `detail`
/// receives kubectl's words when the answer is unknown.
CrdState check_jobset_crd(const spec::JobSpec& job, Millis timeout, std::string& detail);

}  // namespace dtrain::hosts
