// `hosts: kubernetes` and the kubernetes: block: what the loader accepts, its messages (file:line:col,
// the key, the fix), and spec.yaml written and read back. The pods themselves are found at submit
// (kubernetes_pods_test.cpp, tests/integration/cluster_kubernetes_test.cpp).

#include <doctest/doctest.h>

#include "launcher/spec/spec_loader.h"
#include "tests/unit/spec_parse.h"

using namespace dtrain;
using namespace dtrain::spec;
using dtrain::testing::only_section_error;
using dtrain::testing::parse_section;

TEST_CASE("kubernetes: a selector of existing pods makes kubectl the transport and lists no host yet") {
  LoadResult result = parse_section(
      "hosts: kubernetes\n"
      "kubernetes:\n"
      "  namespace: ml-team\n"
      "  selector: app=trainer,tier!=spare\n"
      "  container: main\n"
      "  context: prod\n"
      "  kubeconfig: kube/config\n"
      "  spares: 1\n");
  REQUIRE_MESSAGE(result.ok(), result.message());
  const JobSpec& spec = *result.spec;
  CHECK(spec.transport == TransportKind::kubectl);
  CHECK(spec.hosts.empty());
  CHECK(spec.kubernetes.enabled);
  CHECK(spec.kubernetes.namespace_name == "ml-team");
  CHECK(spec.kubernetes.selector == "app=trainer,tier!=spare");
  CHECK(spec.kubernetes.container == "main");
  CHECK(spec.kubernetes.context == "prod");
  CHECK(spec.kubernetes.kubeconfig == "/specs/kube/config");  // relative to the spec, like hostfile
  CHECK(spec.kubernetes.kubectl == "kubectl");
  CHECK(spec.kubernetes.spares == 1);
  CHECK_FALSE(spec.kubernetes.job.has_value());
}

TEST_CASE("kubernetes: a job block is read with its defaults") {
  LoadResult result = parse_section(
      "hosts: kubernetes\n"
      "kubernetes:\n"
      "  job:\n"
      "    image: registry.example.com/trainer:1.0\n"
      "    pods: 4\n"
      "    gpus_per_pod: 8\n"
      "    node_selector: {nvidia.com/gpu.product: H100}\n"
      "    tolerations: {not_ready: 20s}\n"
      "  spares: 1\n");
  REQUIRE_MESSAGE(result.ok(), result.message());
  const KubernetesJobTemplate& job = result.spec->kubernetes.job.value();
  CHECK(job.image == "registry.example.com/trainer:1.0");
  CHECK(job.pods == 4);
  CHECK(job.gpus_per_pod == 8);
  CHECK(job.node_selector.at("nvidia.com/gpu.product") == "H100");
  CHECK(job.not_ready_toleration == Millis(20'000));
  CHECK(job.unreachable_toleration == Millis(30'000));
  CHECK(job.command == std::vector<std::string>{"sleep", "infinity"});
  CHECK(job.kind == KubernetesJobKind::automatic);  // a JobSet where the cluster has the CRD
}

TEST_CASE("kubernetes: job.kind is auto, job or jobset - spec.yaml keeps it - another value is an error where it is") {
  for (const auto& [text, kind] : {std::pair{"auto", KubernetesJobKind::automatic}, std::pair{"job", KubernetesJobKind::job},
                                   std::pair{"jobset", KubernetesJobKind::jobset}}) {
    LoadResult loaded = parse_section(std::string("hosts: kubernetes\nkubernetes: {job: {kind: ") + text +
                                      ", image: trainer, pods: 2}}\n");
    REQUIRE_MESSAGE(loaded.ok(), loaded.message());
    CHECK(loaded.spec->kubernetes.job->kind == kind);
    std::string kept = to_yaml(*loaded.spec);
    CHECK_MESSAGE(kept.find(std::string("kind: ") + text) != std::string::npos, kept);
    LoadResult again = parse_job_spec(kept, "spec.yaml", "/specs", {});
    REQUIRE_MESSAGE(again.ok(), (again.message() + "\n" + kept));
    CHECK(again.spec->kubernetes == loaded.spec->kubernetes);
  }
  std::string error = only_section_error("hosts: kubernetes\nkubernetes:\n  job: {kind: jobsets, image: i, pods: 2}\n");
  CHECK_MESSAGE(error.find("job.yaml:6:15: kubernetes.job.kind: ") == 0, error);
  CHECK_MESSAGE(error.find("did you mean 'jobset'") != std::string::npos, error);
}

TEST_CASE("kubernetes: mistakes are reported where they are, with the fix") {
  CHECK(only_section_error("hosts: kubernetes\n") ==
        "job.yaml:4:8: hosts: hosts: kubernetes needs a kubernetes: block naming the pods: {namespace: ml, selector: "
        "app=trainer} for pods that exist, or {job: {image: ..., pods: 4}} for pods dtrain creates");
  CHECK(only_section_error("hosts: kubernetes\nkubernetes:\n  namespace: ml\n") ==
        "job.yaml:6:3: kubernetes: say which pods: selector: app=trainer (pods that exist) or job: {image: ..., pods: "
        "4} (pods dtrain creates)");
  CHECK(only_section_error("hosts: kubernetes\nkubernetes:\n  namespace: ML_Team\n  selector: app=x\n") ==
        "job.yaml:6:14: kubernetes.namespace: 'ML_Team' is not a Kubernetes namespace name; use at most 63 lower-case "
        "letters, digits and '-', starting and ending with a letter or digit");
  CHECK(only_section_error("hosts: kubernetes\nkubernetes:\n  selector: app=x\n  job: {image: i, pods: 2}\n") ==
        "job.yaml:7:8: kubernetes.job: selector and job are both set; use selector for pods that exist, or job for "
        "pods dtrain creates");
  CHECK(only_section_error("hosts: kubernetes\nkubernetes:\n  job: {pods: 2}\n") ==
        "job.yaml:6:8: kubernetes.job.image: kubernetes.job needs the image its pods run (one that holds dtrain at "
        "ssh.remote_dtrain or the same path as here); add image: registry.example.com/trainer:1.0");
  CHECK(only_section_error("hosts: kubernetes\nkubernetes:\n  job: {image: i, pods: 2}\n  spares: 2\n") ==
        "job.yaml:7:11: kubernetes.spares: 2 spares leave none of the job's 2 pods to train on; raise "
        "kubernetes.job.pods or lower spares");
  CHECK(only_section_error("hosts: kubernetes\nspares: [gpu09]\nkubernetes: {selector: app=x}\n") ==
        "job.yaml:5:9: spares: hosts: kubernetes takes its hosts from pods; choose them with kubernetes.selector and "
        "set kubernetes.spares, and remove spares");
  CHECK(only_section_error("hosts: kubernetes\ntransport: ssh\nkubernetes: {selector: app=x}\n") ==
        "job.yaml:5:12: transport: hosts: kubernetes reaches its pods with kubectl exec; remove transport: or set it "
        "to kubectl");
  CHECK(only_section_error("hosts: [gpu01]\nkubernetes: {selector: app=x}\n") ==
        "job.yaml:5:13: kubernetes: the kubernetes: block is read only with hosts: kubernetes (or transport: kubectl); "
        "set hosts: kubernetes or remove the block");
  CHECK(only_section_error("hosts: kubernetes\nkubernetes: {selector: app=x, namepsace: ml}\n")
            .find("did you mean 'namespace'") != std::string::npos);
}

TEST_CASE("kubernetes: spec.yaml keeps the block, and once the pods are hosts it reads back equal") {
  LoadResult loaded = parse_section(
      "hosts: kubernetes\n"
      "kubernetes: {namespace: ml, selector: app=trainer, container: main, spares: 1}\n");
  REQUIRE_MESSAGE(loaded.ok(), loaded.message());
  JobSpec spec = *loaded.spec;
  std::string unresolved = to_yaml(spec);
  CHECK(unresolved.find("hosts: kubernetes") != std::string::npos);
  LoadResult again = parse_job_spec(unresolved, "spec.yaml", "/specs", {});
  REQUIRE_MESSAGE(again.ok(), (again.message() + "\n" + unresolved));
  CHECK(again.spec->kubernetes == spec.kubernetes);
  CHECK(again.spec->transport == TransportKind::kubectl);

  // As submit leaves it: the pods are the hosts, reached at their IPs.
  spec.hosts = {HostEntry{"trainer-0", "", 0, 8, {}, false, "10.77.0.11"},
                HostEntry{"trainer-1", "", 0, 8, {}, false, "10.77.0.12"}};
  spec.spares = {HostEntry{"trainer-2", "", 0, 8, {}, true, "10.77.0.13"}};
  std::string resolved = to_yaml(spec);
  LoadResult read_back = parse_job_spec(resolved, "spec.yaml", "/specs", {});
  REQUIRE_MESSAGE(read_back.ok(), (read_back.message() + "\n" + resolved));
  CHECK(read_back.spec->hosts == spec.hosts);
  CHECK(read_back.spec->spares == spec.spares);
  CHECK(read_back.spec->kubernetes == spec.kubernetes);
  CHECK(read_back.spec->transport == TransportKind::kubectl);
}

TEST_CASE("kubernetes: a created job's resolved spec names its pods by the run label, never the job again") {
  LoadResult loaded = parse_section("hosts: kubernetes\nkubernetes: {job: {image: trainer, pods: 2}}\n");
  REQUIRE_MESSAGE(loaded.ok(), loaded.message());
  JobSpec spec = *loaded.spec;
  spec.kubernetes.selector = "dtrain.io/run=job-1";  // what submit sets once it created the job
  spec.hosts = {HostEntry{"job-1-0-abcde", "", 0, 1, {}, false, "10.77.0.11"}};
  std::string resolved = to_yaml(spec);
  CHECK(resolved.find("image") == std::string::npos);
  LoadResult read_back = parse_job_spec(resolved, "spec.yaml", "/specs", {});
  REQUIRE_MESSAGE(read_back.ok(), (read_back.message() + "\n" + resolved));
  CHECK(read_back.spec->kubernetes.selector == "dtrain.io/run=job-1");
  CHECK_FALSE(read_back.spec->kubernetes.job.has_value());
}
