#include "launcher/hosts/kubernetes_access.h"

#include "launcher/base/child_process.h"
#include "launcher/base/strings.h"
#include "launcher/hosts/kubernetes_hosts.h"

namespace dtrain::hosts {
namespace {

std::string quoted(const std::string& text) { return "'" + printable(text, 200) + "'"; }

std::string first_line(const std::string& text) {
  std::string_view trimmed = trim(text);
  return std::string(trimmed.substr(0, trimmed.find('\n')));
}

}  // namespace

std::vector<KubernetesPermission> permissions_needed(const spec::KubernetesSettings& kube,
                                                     events::KubernetesKind creates) {
  std::vector<KubernetesPermission> needed{
      {"get", "pods", "", "reading the pods"},
      {"list", "pods", "", "finding the pods"},
      {"watch", "pods", "", "noticing a pod lost mid-run"},
      {"create", "pods", "exec", "starting dtrain's agent in each pod"},
  };
  if (kube.job && creates == events::KubernetesKind::jobset) {
    needed.push_back({"create", kJobSetResource, "", "creating the run's JobSet"});
    needed.push_back({"delete", kJobSetResource, "", "deleting it at the end"});
  } else if (kube.job) {
    needed.push_back({"create", "jobs.batch", "", "creating the run's Indexed Job"});
    needed.push_back({"delete", "jobs.batch", "", "deleting it at the end"});
    needed.push_back({"create", "services", "", "creating the pods' headless Service"});
    needed.push_back({"delete", "services", "", "deleting it at the end"});
  }
  return needed;
}

std::string describe(const KubernetesPermission& permission) {
  return permission.verb + " on " + permission.resource +
         (permission.subresource.empty() ? "" : "/" + permission.subresource);
}

std::vector<std::string> can_i_arguments(const KubernetesPermission& permission) {
  std::vector<std::string> arguments{"auth", "can-i", permission.verb, permission.resource};
  if (!permission.subresource.empty()) arguments.push_back("--subresource=" + permission.subresource);
  return arguments;
}

AccessVerdict read_can_i(int exit_code, const std::string& out, const std::string& err) {
  std::string line = first_line(out);
  // "no - REASON" when the authorizer gives one; the reason is the server's text.
  if (exit_code == 0 && line == "yes") return {AccessAnswer::allowed, ""};
  if (exit_code == 1 && line == "no") return {AccessAnswer::denied, ""};
  if (exit_code == 1 && starts_with(line, "no - ")) return {AccessAnswer::denied, printable(line.substr(5), 300)};
  std::string said = printable(std::string(trim(err)), 600);
  if (said.empty()) said = printable(line, 300);
  return {AccessAnswer::unknown, said.empty() ? "kubectl exited " + std::to_string(exit_code) + " without an answer" : said};
}

std::vector<std::string> jobset_discovery_arguments() {
  return {"api-resources", std::string("--api-group=") + kJobSetGroup, "-o", "name"};
}

CrdState read_jobset_discovery(int exit_code, const std::string& out) {
  for (const std::string& line : split(out, '\n')) {
    if (trim(line) == kJobSetResource) return CrdState::installed;
  }
  return exit_code == 0 ? CrdState::absent : CrdState::unknown;
}

std::string to_string(AccessAnswer answer) {
  static constexpr const char* kText[] = {"ok", "MISSING", "unknown"};  // allowed, denied, unknown
  return kText[static_cast<int>(answer)];
}

std::string to_string(CrdState state) {
  static constexpr const char* kText[] = {"installed", "not installed", "unknown"};  // as CrdState orders them
  return kText[static_cast<int>(state)];
}

std::string describe_namespace(const spec::KubernetesSettings& kube) {
  std::string text = kube.namespace_name.empty() ? "the context's namespace" : "namespace " + quoted(kube.namespace_name);
  if (!kube.context.empty()) text += " of context " + quoted(kube.context);
  return text;
}

std::string missing_permission_message(const KubernetesPermission& permission, const spec::KubernetesSettings& kube) {
  std::string where = kube.namespace_name.empty() ? "the context's namespace" : "namespace " + kube.namespace_name;
  return "missing permission: " + describe(permission) + " in " + describe_namespace(kube) + " (needed for " +
         permission.needed_for + "); ask your cluster admin for a Role granting " + describe(permission) + " in " +
         where + ", bound to the kubeconfig's user";
}

Result<std::vector<AccessCheck>> check_access(const spec::JobSpec& job, Millis timeout,
                                              events::KubernetesKind creates) {
  transport::KubectlOptions options = kubectl_options_for(job);
  std::vector<AccessCheck> checks;
  for (const KubernetesPermission& permission : permissions_needed(job.kubernetes, creates)) {
    const std::string what = "kubectl auth can-i " + describe(permission) + " (" + describe_namespace(job.kubernetes) + ")";
    Result<CommandOutput> output = run_command(transport::kubectl_argv(options, can_i_arguments(permission)), timeout);
    if (!output) {
      return Error::user(what + ": " + output.error().message +
                         "; install kubectl (or set kubernetes.kubectl to its path) and check that the cluster answers");
    }
    AccessVerdict verdict = read_can_i(output->exit_code, output->out, output->err);
    // No yes or no: kubectl could not ask (kubeconfig, context, server). The next calls would
    // fail the same way, each after its own wait.
    if (verdict.answer == AccessAnswer::unknown) {
      return Error::user(transport::explain_kubectl_failure(what, verdict.detail, options));
    }
    checks.push_back({permission, std::move(verdict)});
  }
  return checks;
}

CrdState check_jobset_crd(const spec::JobSpec& job, Millis timeout, std::string& detail) {
  transport::KubectlOptions options = kubectl_options_for(job);
  Result<CommandOutput> output = run_command(transport::kubectl_argv(options, jobset_discovery_arguments()), timeout);
  if (!output) {
    detail = output.error().message;
    return CrdState::unknown;
  }
  CrdState state = read_jobset_discovery(output->exit_code, output->out);
  if (state == CrdState::unknown) detail = printable(std::string(trim(output->err)), 300);
  return state;
}

Result<JobKindChoice> choose_job_kind(const spec::KubernetesSettings& kube, CrdState crd, const std::string& detail) {
  const spec::KubernetesJobKind asked = kube.job ? kube.job->kind : spec::KubernetesJobKind::job;
  if (asked == spec::KubernetesJobKind::job) return JobKindChoice{};
  const std::string unknown = "could not tell from discovery whether the cluster (" + describe_namespace(kube) +
                              ") has the JobSet CRD (" + kJobSetResource +
                              "): " + (detail.empty() ? "kubectl api-resources failed" : detail);
  if (asked == spec::KubernetesJobKind::automatic) {
    if (crd == CrdState::installed) return JobKindChoice{events::KubernetesKind::jobset, ""};
    if (crd == CrdState::absent) return JobKindChoice{};
    return JobKindChoice{events::KubernetesKind::job, "kubernetes.job.kind auto: " + unknown + "; creating an Indexed Job"};
  }
  if (crd == CrdState::installed) return JobKindChoice{events::KubernetesKind::jobset, ""};
  if (crd == CrdState::unknown) {
    return JobKindChoice{events::KubernetesKind::jobset, "kubernetes.job.kind jobset: " + unknown + "; creating the JobSet anyway"};
  }
  return Error::user("kubernetes.job.kind: jobset, but the cluster has no JobSet CRD (" + std::string(kJobSetResource) +
                     "): kubectl api-resources --api-group=" + kJobSetGroup + " for " + describe_namespace(kube) +
                     " lists none; nothing was created. Ask your cluster admin to install JobSet "
                     "(https://jobset.sigs.k8s.io/docs/installation/), or set kubernetes.job.kind: job (or auto) "
                     "for an Indexed Job and a headless Service");
}

Result<JobKindChoice> resolve_job_kind(const spec::JobSpec& job, Millis timeout) {
  if (!job.kubernetes.job || job.kubernetes.job->kind == spec::KubernetesJobKind::job) return JobKindChoice{};
  std::string detail;
  CrdState crd = check_jobset_crd(job, timeout, detail);
  return choose_job_kind(job.kubernetes, crd, detail);
}

}  // namespace dtrain::hosts
