// hosts: kubernetes from outside a run and into pods that lack dtrain (issue 31), on the namespace
// cluster with the emulated API server, through the real kubectl: `dtrain hosts` asks the API
// server for each permission (kubectl auth can-i) and lists the selector's pods; a run whose spec
// names no ssh.remote_dtrain copies this binary into each pod's cache directory (a host's own
// private /root, not the shared build tree), checks its sha256, and the next run uses that copy.
// Skips (exit 77) where the emulator, kubectl or the cluster is unavailable.

#include <doctest/doctest.h>

#include <algorithm>
#include <sstream>

#include "launcher/base/version.h"
#include "tests/integration/cluster_job.h"

using namespace dtrain::testing;

namespace {

// A pod named `name` pinned to cluster host `host` holding its slot with sleep, container "main"
// (kubectl run, as a user would try one), labelled group=`group`.
void run_pod(const TestCluster& cluster, const std::string& name, int host, const std::string& group) {
  nlohmann::json overrides = {
      {"apiVersion", "v1"},
      {"spec",
       {{"nodeName", cluster.host(host).name},
        {"terminationGracePeriodSeconds", 1},
        {"containers", nlohmann::json::array({{{"name", "main"}, {"image", "debian"}, {"command", {"sleep", "infinity"}}}})}}}};
  CommandOutput made = cluster.kubectl({"run", name, "--image=debian", "--restart=Never", "--labels=group=" + group,
                                        "--overrides=" + overrides.dump()});
  REQUIRE_MESSAGE(made.status == 0, made.output);
}

// Pods GROUP-0 on host 1 and GROUP-1 on host 2, both Ready, as kubectl itself waits for it
// (bounded).
void start_two_pods(const TestCluster& cluster, const std::string& group) {
  run_pod(cluster, group + "-0", 1, group);
  run_pod(cluster, group + "-1", 2, group);
  CommandOutput ready = cluster.kubectl({"wait", "--for=condition=Ready", "pod", "-l", "group=" + group, "--timeout=60s"});
  REQUIRE_MESSAGE(ready.status == 0, ready.output);
}

std::string pods_spec(const TestCluster& cluster, const std::string& name, const std::string& group,
                      const std::string& more) {
  std::ostringstream yaml;
  yaml << "version: 1\nname: " << name << "\nhosts: kubernetes\nslots_per_host: 2\nkubernetes:\n"
       << "  namespace: " << cluster.kube_namespace() << "\n  selector: group=" << group
       << "\n  kubeconfig: " << cluster.kubeconfig() << "\n" << more;
  return yaml.str();
}

// The reference trainer next to this build's dtrain: a copied agent is not next to it.
std::string trainer_path() {
  std::string exe = DTRAIN_EXE;
  return exe.substr(0, exe.rfind('/')) + "/dtrain-train";
}

std::string sha256_of(const std::string& text) {
  std::string line = text.substr(0, text.find(' '));
  return line.size() == 64 ? line : "";
}

}  // namespace

TEST_CASE("dtrain hosts on pods - each permission ok and the pods listed - without exec it names pods/exec and exits 3") {
  if (std::string why = TestCluster::kubernetes_skip_reason(); !why.empty()) skip_test(why);
  TestCluster cluster(2, TestCluster::kubernetes_options());
  DTRAIN_REQUIRE_CLUSTER(cluster);
  start_two_pods(cluster, "pre");
  ClusterJob job(cluster, "hosts");
  std::string spec = job.write_spec_text(pods_spec(cluster, "pre", "pre", "  spares: 1\nworker: {command: [dtrain-train]}\n"));

  CommandOutput allowed = cluster.exec("ctl", {DTRAIN_EXE, "hosts", spec});
  INFO(allowed.output);
  CHECK(allowed.status == 0);
  for (const char* line : {"get on pods            ok", "list on pods           ok", "watch on pods          ok",
                           "create on pods/exec    ok"}) {
    CHECK(allowed.output.find(line) != std::string::npos);
  }
  CHECK(allowed.output.find("JobSet CRD (jobsets.jobset.x-k8s.io): not installed") != std::string::npos);
  CHECK(allowed.output.find("pre-0") != std::string::npos);
  CHECK(allowed.output.find(cluster.host(1).name) != std::string::npos);
  CHECK(allowed.output.find(cluster.host(1).ip) != std::string::npos);
  CHECK(allowed.output.find(" host\n") != std::string::npos);
  CHECK(allowed.output.find(" spare\n") != std::string::npos);
  // The API server was asked, not guessed at: one SelfSubjectAccessReview per permission.
  std::string requests = TestCluster::read_text(cluster.kube_requests());
  CHECK(requests.find("selfsubjectaccessreviews") != std::string::npos);

  CommandOutput json = cluster.exec("ctl", {DTRAIN_EXE, "hosts", spec, "--json"});
  REQUIRE(json.status == 0);
  nlohmann::json document = nlohmann::json::parse(json.output);
  CHECK(document["ok"] == true);
  REQUIRE(document["kubernetes"]["pods"].size() == 2);
  CHECK(document["kubernetes"]["pods"][0]["name"] == "pre-0");
  CHECK(document["kubernetes"]["pods"][0]["use"] == "host");
  CHECK(document["kubernetes"]["pods"][1]["use"] == "spare");

  CommandOutput refused = cluster.exec("ctl", {DTRAIN_EXE, "hosts", spec, "--set", "kubernetes.context=no-exec"});
  INFO(refused.output);
  CHECK(refused.status == 3);
  CHECK(refused.output.find("create on pods/exec    MISSING") != std::string::npos);
  CHECK(refused.output.find("missing permission: create on pods/exec in namespace '" + cluster.kube_namespace() +
                            "' of context 'no-exec'") != std::string::npos);
  CHECK(refused.output.find("ask your cluster admin for a Role granting create on pods/exec") != std::string::npos);

  // transport: kubectl with the pods named (a run's spec.yaml): each named pod is looked for.
  std::string named = job.write_spec_text("version: 1\nhosts: [pre-0, pre-gone]\ntransport: kubectl\nkubernetes: {namespace: " +
                                          cluster.kube_namespace() + ", kubeconfig: " + cluster.kubeconfig() +
                                          "}\nworker: {command: [dtrain-train]}\n");
  CommandOutput one_gone = cluster.exec("ctl", {DTRAIN_EXE, "hosts", named});
  INFO(one_gone.output);
  CHECK(one_gone.status == 3);
  CHECK(one_gone.output.find("pod pre-gone is not in namespace '" + cluster.kube_namespace() + "'") != std::string::npos);
  CHECK(one_gone.output.find(cluster.host(1).ip) != std::string::npos);

  CommandOutput unknown = cluster.exec("ctl", {DTRAIN_EXE, "hosts", spec, "--set", "kubernetes.context=nowhere"});
  INFO(unknown.output);
  CHECK(unknown.status == 3);
  CHECK(unknown.output.find("context \"nowhere\" does not exist") != std::string::npos);
  CHECK(unknown.output.find("kubectl config get-contexts") != std::string::npos);
}

TEST_CASE("dtrain hosts reads the JobSet CRD from discovery - installed where the cluster serves it") {
  if (std::string why = TestCluster::kubernetes_skip_reason(); !why.empty()) skip_test(why);
  TestCluster cluster(2, {"--kubernetes", "--kube-jobset-crd"});
  DTRAIN_REQUIRE_CLUSTER(cluster);
  start_two_pods(cluster, "crd");
  ClusterJob job(cluster, "crd");
  std::string spec = job.write_spec_text(pods_spec(cluster, "crd", "crd", "worker: {command: [dtrain-train]}\n"));
  CommandOutput checked = cluster.exec("ctl", {DTRAIN_EXE, "hosts", spec, "--json"});
  INFO(checked.output);
  REQUIRE(checked.status == 0);
  CHECK(nlohmann::json::parse(checked.output)["kubernetes"]["jobset_crd"] == "installed");

  // kubernetes.job (kind auto) would create a JobSet here: its rights are the ones asked.
  std::string created = job.write_spec_text("version: 1\nhosts: kubernetes\nkubernetes:\n  namespace: " +
                                            cluster.kube_namespace() + "\n  kubeconfig: " + cluster.kubeconfig() +
                                            "\n  job: {image: debian, pods: 2}\nworker: {command: [dtrain-train]}\n");
  CommandOutput planned = cluster.exec("ctl", {DTRAIN_EXE, "hosts", created, "--json"});
  INFO(planned.output);
  REQUIRE(planned.status == 0);
  nlohmann::json kube = nlohmann::json::parse(planned.output)["kubernetes"];
  CHECK(kube["creates"] == "JobSet");
  std::vector<std::string> resources;
  for (const auto& check : kube["access"]) resources.push_back(check["verb"].get<std::string>() + " " + check["resource"].get<std::string>());
  CHECK(std::count(resources.begin(), resources.end(), "create jobsets.jobset.x-k8s.io") == 1);
  CHECK(std::count(resources.begin(), resources.end(), "create jobs.batch") == 0);
  CHECK(kube["pods_note"].get<std::string>().find("as a JobSet") != std::string::npos);
}

TEST_CASE("pods without dtrain get a checked copy of this binary - the next run uses it") {
  if (std::string why = TestCluster::kubernetes_skip_reason(); !why.empty()) skip_test(why);
  TestCluster cluster(2, TestCluster::kubernetes_options());
  DTRAIN_REQUIRE_CLUSTER(cluster);
  start_two_pods(cluster, "bare");
  // Each pod sees its host's own /root ($HOME): no dtrain cache there yet.
  const std::string cache = std::string("$HOME/.cache/dtrain/") + dtrain::kVersion + "/dtrain";
  for (const char* pod : {"bare-0", "bare-1"}) {
    CommandOutput absent = cluster.kubectl({"exec", pod, "--", "sh", "-c", "test ! -e \"" + cache + "\""});
    REQUIRE_MESSAGE(absent.status == 0, absent.output);
  }
  const std::string expected_sha = sha256_of(run_command({"sha256sum", DTRAIN_EXE}).output);
  REQUIRE(!expected_sha.empty());
  const std::string worker = "worker: {command: [" + trainer_path() + ", --steps, \"40\", --log-every, \"20\"], backend: gloo}\n"
                             "heartbeat: {interval: 200ms, timeout: 2s, hang_timeout: 10s}\nstop_grace: 2s\n";

  ClusterJob first(cluster, "copy");
  first.write_spec_text(pods_spec(cluster, "copy", "bare", worker));
  REQUIRE(first.run({}, 240000));
  INFO(first.err());
  REQUIRE(first.exit_code() == 0);
  CHECK(final_line(first.rank_log(3)).find("final step=40") != std::string::npos);
  std::string log = TestCluster::read_text(first.run_dir() + "/supervisor.log");
  INFO(log);
  for (const char* pod : {"bare-0", "bare-1"}) {
    CHECK(log.find(std::string(pod) + ": provisioning: copied") != std::string::npos);
    // The copy in the pod is this binary, byte for byte, and outside the shared build tree.
    CommandOutput sum = cluster.kubectl({"exec", pod, "--", "sh", "-c", "sha256sum \"" + cache + "\""});
    CHECK(sha256_of(sum.output) == expected_sha);
    CommandOutput where = cluster.kubectl({"exec", pod, "--", "sh", "-c", "echo \"" + cache + "\""});
    CHECK(where.output.find(DTRAIN_BINARY_DIR) == std::string::npos);
    CHECK(where.output.find(DTRAIN_SOURCE_DIR) == std::string::npos);
  }
  CHECK(log.find("sha256 " + expected_sha + " checked") != std::string::npos);

  ClusterJob second(cluster, "cached");
  second.write_spec_text(pods_spec(cluster, "cached", "bare", worker));
  REQUIRE(second.run({}, 240000));
  INFO(second.err());
  REQUIRE(second.exit_code() == 0);
  std::string again = TestCluster::read_text(second.run_dir() + "/supervisor.log");
  INFO(again);
  CHECK(again.find("bare-0: provisioning: cached copy") != std::string::npos);
  CHECK(again.find("bare-1: provisioning: cached copy") != std::string::npos);
  CHECK(again.find("provisioning: copied") == std::string::npos);

  cluster.kubectl({"delete", "pod", "-l", "group=bare", "--grace-period=1", "--wait=false"});
  check_nothing_left(cluster, second, 15000);
}
