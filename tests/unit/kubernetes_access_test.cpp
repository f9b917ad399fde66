// `dtrain hosts` for hosts: kubernetes, the parts that decide: which permissions a spec needs,
// the exact `kubectl auth can-i` and `api-resources` calls, and their answers read (kubectl's
// output is untrusted); then check_access against a fake kubectl that answers as a cluster would.
// The real kubectl against the emulated API server: tests/integration/cluster_kubernetes_hosts_test.cpp.

#include <doctest/doctest.h>

#include "launcher/hosts/kubernetes_access.h"
#include "launcher/transport/kubectl_transport.h"
#include "tests/fakes/fake_kubectl.h"

using namespace dtrain;
using namespace dtrain::hosts;
using dtrain::testing::FakeKubectl;

namespace {

spec::JobSpec kubernetes_job(const std::string& kubectl) {
  spec::JobSpec job;
  job.kubernetes.enabled = true;
  job.kubernetes.kubectl = kubectl;
  job.kubernetes.namespace_name = "ml";
  job.kubernetes.context = "prod";
  job.kubernetes.selector = "app=trainer";
  return job;
}

}  // namespace

TEST_CASE("pods by selector need get, list, watch on pods and create on pods/exec - a job adds jobs and services") {
  spec::KubernetesSettings kube;
  std::vector<std::string> described;
  for (const KubernetesPermission& permission : permissions_needed(kube)) described.push_back(describe(permission));
  CHECK(described == std::vector<std::string>{"get on pods", "list on pods", "watch on pods", "create on pods/exec"});

  kube.job = spec::KubernetesJobTemplate{};
  described.clear();
  for (const KubernetesPermission& permission : permissions_needed(kube)) described.push_back(describe(permission));
  CHECK(described == std::vector<std::string>{"get on pods", "list on pods", "watch on pods", "create on pods/exec",
                                              "create on jobs.batch", "delete on jobs.batch", "create on services",
                                              "delete on services"});

  // A JobSet instead: its controller makes the Job and the Service.
  described.clear();
  for (const KubernetesPermission& permission : permissions_needed(kube, events::KubernetesKind::jobset)) {
    described.push_back(describe(permission));
  }
  CHECK(described == std::vector<std::string>{"get on pods", "list on pods", "watch on pods", "create on pods/exec",
                                              "create on jobsets.jobset.x-k8s.io", "delete on jobsets.jobset.x-k8s.io"});
}

TEST_CASE("kubernetes.job.kind against the CRD: auto follows discovery, jobset without the CRD is an error with the fix") {
  spec::KubernetesSettings kube;
  kube.namespace_name = "ml";
  kube.context = "prod";
  kube.job = spec::KubernetesJobTemplate{};
  using events::KubernetesKind;
  auto chosen = [&](spec::KubernetesJobKind asked, CrdState crd) {
    kube.job->kind = asked;
    Result<JobKindChoice> choice = choose_job_kind(kube, crd, "error: the server is unreachable");
    REQUIRE_MESSAGE(choice.ok(), choice.error().message);
    return *choice;
  };
  for (CrdState crd : {CrdState::installed, CrdState::absent, CrdState::unknown}) {
    CHECK(chosen(spec::KubernetesJobKind::job, crd) == JobKindChoice{KubernetesKind::job, ""});
  }
  CHECK(chosen(spec::KubernetesJobKind::automatic, CrdState::installed) == JobKindChoice{KubernetesKind::jobset, ""});
  CHECK(chosen(spec::KubernetesJobKind::automatic, CrdState::absent) == JobKindChoice{KubernetesKind::job, ""});
  CHECK(chosen(spec::KubernetesJobKind::jobset, CrdState::installed) == JobKindChoice{KubernetesKind::jobset, ""});
  // Discovery could not answer: what is assumed is said, with kubectl's words.
  JobKindChoice guessed = chosen(spec::KubernetesJobKind::automatic, CrdState::unknown);
  CHECK(guessed.kind == KubernetesKind::job);
  CHECK_MESSAGE(guessed.warning.find("the server is unreachable; creating an Indexed Job") != std::string::npos,
                guessed.warning);
  JobKindChoice tried = chosen(spec::KubernetesJobKind::jobset, CrdState::unknown);
  CHECK(tried.kind == KubernetesKind::jobset);
  CHECK_MESSAGE(tried.warning.find("creating the JobSet anyway") != std::string::npos, tried.warning);

  kube.job->kind = spec::KubernetesJobKind::jobset;
  Result<JobKindChoice> refused = choose_job_kind(kube, CrdState::absent, "");
  REQUIRE(!refused.ok());
  CHECK(refused.error().kind == ErrorKind::user);
  CHECK(refused.error().message ==
        "kubernetes.job.kind: jobset, but the cluster has no JobSet CRD (jobsets.jobset.x-k8s.io): kubectl "
        "api-resources --api-group=jobset.x-k8s.io for namespace 'ml' of context 'prod' lists none; nothing was "
        "created. Ask your cluster admin to install JobSet (https://jobset.sigs.k8s.io/docs/installation/), or set "
        "kubernetes.job.kind: job (or auto) for an Indexed Job and a headless Service");
}

TEST_CASE("resolve_job_kind asks discovery only when the kind depends on it") {
  FakeKubectl installed("echo jobsets.jobset.x-k8s.io\n");
  spec::JobSpec job = kubernetes_job(installed.path);
  job.kubernetes.selector.clear();
  job.kubernetes.job = spec::KubernetesJobTemplate{};
  Result<JobKindChoice> automatic = resolve_job_kind(job, Millis(10'000));
  REQUIRE(automatic.ok());
  CHECK(automatic->kind == events::KubernetesKind::jobset);
  CHECK(installed.args() == "--context prod -n ml api-resources --api-group=jobset.x-k8s.io -o name\n");

  FakeKubectl untouched("echo called >&2; exit 1\n");
  job.kubernetes.kubectl = untouched.path;
  job.kubernetes.job->kind = spec::KubernetesJobKind::job;
  Result<JobKindChoice> plain = resolve_job_kind(job, Millis(10'000));
  REQUIRE(plain.ok());
  CHECK(plain->kind == events::KubernetesKind::job);
  CHECK(untouched.args().empty());
}

TEST_CASE("exec is asked as a subresource - never as pods/exec, which kubectl reads as the pod named exec") {
  KubernetesPermission exec{"create", "pods", "exec", "agents"};
  CHECK(can_i_arguments(exec) == std::vector<std::string>{"auth", "can-i", "create", "pods", "--subresource=exec"});
  KubernetesPermission list{"list", "pods", "", "pods"};
  CHECK(can_i_arguments(list) == std::vector<std::string>{"auth", "can-i", "list", "pods"});
}

TEST_CASE("kubectl auth can-i answers are read strictly") {
  CHECK(read_can_i(0, "yes\n", "") == AccessVerdict{AccessAnswer::allowed, ""});
  CHECK(read_can_i(1, "no\n", "") == AccessVerdict{AccessAnswer::denied, ""});
  CHECK(read_can_i(1, "no - User \"x\" has no rule that allows it\n", "") ==
        AccessVerdict{AccessAnswer::denied, "User \"x\" has no rule that allows it"});
  // A warning on stderr does not change a clear answer.
  CHECK(read_can_i(0, "yes\n", "Warning: resource 'jobs' is not namespace scoped\n").answer == AccessAnswer::allowed);
  // An error is neither yes nor no: kubectl could not ask.
  AccessVerdict error = read_can_i(1, "", "error: context \"x\" does not exist\n");
  CHECK(error.answer == AccessAnswer::unknown);
  CHECK(error.detail == "error: context \"x\" does not exist");
  // "yes" with a failing exit, or anything else on stdout, is no answer either.
  CHECK(read_can_i(1, "yes\n", "").answer == AccessAnswer::unknown);
  CHECK(read_can_i(0, "no\n", "").answer == AccessAnswer::unknown);
  CHECK(read_can_i(0, "yesno\n", "").answer == AccessAnswer::unknown);
  CHECK(read_can_i(0, "", "").detail == "kubectl exited 0 without an answer");
  // Control bytes from the server never reach the terminal.
  CHECK(read_can_i(1, "no - bad\x1b[2Jreason\n", "").detail.find('\x1b') == std::string::npos);
}

TEST_CASE("the JobSet CRD is read from discovery") {
  CHECK(jobset_discovery_arguments() == std::vector<std::string>{"api-resources", "--api-group=jobset.x-k8s.io", "-o", "name"});
  CHECK(read_jobset_discovery(0, "jobsets.jobset.x-k8s.io\n") == CrdState::installed);
  CHECK(read_jobset_discovery(0, "") == CrdState::absent);
  // Another group's discovery failed (exit 1) but the JobSet group answered.
  CHECK(read_jobset_discovery(1, "jobsets.jobset.x-k8s.io\n") == CrdState::installed);
  CHECK(read_jobset_discovery(1, "") == CrdState::unknown);
  CHECK(read_jobset_discovery(0, "xjobsets.jobset.x-k8s.io\n") == CrdState::absent);
}

TEST_CASE("a missing permission names itself, the namespace and the fix") {
  spec::KubernetesSettings kube;
  kube.namespace_name = "ml";
  kube.context = "prod";
  std::string message = missing_permission_message({"create", "pods", "exec", "starting agents"}, kube);
  CHECK(message.find("missing permission: create on pods/exec in namespace 'ml' of context 'prod'") == 0);
  CHECK(message.find("ask your cluster admin for a Role granting create on pods/exec in namespace ml") != std::string::npos);
  kube.namespace_name.clear();
  kube.context.clear();
  CHECK(missing_permission_message({"list", "pods", "", "x"}, kube).find("in the context's namespace") != std::string::npos);
}

TEST_CASE("check_access asks each permission with the spec's context and namespace") {
  FakeKubectl kubectl(
      "case \"$*\" in\n"
      "  *--subresource=exec*) echo 'no - User \"u\" cannot'; exit 1 ;;\n"
      "  *) echo yes ;;\n"
      "esac\n");
  Result<std::vector<AccessCheck>> checks = check_access(kubernetes_job(kubectl.path), Millis(10'000));
  REQUIRE(checks);
  REQUIRE(checks->size() == 4);
  CHECK((*checks)[0].verdict.answer == AccessAnswer::allowed);
  CHECK((*checks)[3].verdict == AccessVerdict{AccessAnswer::denied, "User \"u\" cannot"});
  CHECK(kubectl.args() ==
        "--context prod -n ml auth can-i get pods\n"
        "--context prod -n ml auth can-i list pods\n"
        "--context prod -n ml auth can-i watch pods\n"
        "--context prod -n ml auth can-i create pods --subresource=exec\n");
}

TEST_CASE("check_access stops at the first call kubectl cannot answer, and explains it") {
  FakeKubectl kubectl("echo 'error: context \"prod\" does not exist' >&2; exit 1\n");
  Result<std::vector<AccessCheck>> checks = check_access(kubernetes_job(kubectl.path), Millis(10'000));
  REQUIRE(!checks);
  CHECK(checks.error().message.find("context \"prod\" does not exist") != std::string::npos);
  CHECK(checks.error().message.find("kubectl config get-contexts") != std::string::npos);
  CHECK(kubectl.args() == "--context prod -n ml auth can-i get pods\n");
}

TEST_CASE("check_access without kubectl is an error naming the fix - never a crash") {
  Result<std::vector<AccessCheck>> checks = check_access(kubernetes_job("/nonexistent/kubectl"), Millis(10'000));
  REQUIRE(!checks);
  CHECK(checks.error().message.find("set kubernetes.kubectl") != std::string::npos);
}

TEST_CASE("check_jobset_crd reads kubectl api-resources") {
  FakeKubectl installed("echo jobsets.jobset.x-k8s.io\n");
  std::string detail;
  CHECK(check_jobset_crd(kubernetes_job(installed.path), Millis(10'000), detail) == CrdState::installed);
  CHECK(installed.args() == "--context prod -n ml api-resources --api-group=jobset.x-k8s.io -o name\n");
  FakeKubectl failing("echo 'error: Unauthorized' >&2; exit 1\n");
  CHECK(check_jobset_crd(kubernetes_job(failing.path), Millis(10'000), detail) == CrdState::unknown);
  CHECK(detail == "error: Unauthorized");
}

TEST_CASE("a kubeconfig kubectl cannot read is named, with the fix") {
  transport::KubectlOptions options;
  options.kubeconfig = "/nonexistent/config";
  std::string message = transport::explain_kubectl_failure(
      "kubectl auth can-i get on pods", "error: stat /nonexistent/config: no such file or directory\n", options);
  CHECK(message.find("kubectl cannot read the kubeconfig /nonexistent/config; fix kubernetes.kubeconfig") != std::string::npos);
}
