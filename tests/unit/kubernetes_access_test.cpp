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
