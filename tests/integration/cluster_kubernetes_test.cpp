// hosts: kubernetes on the namespace cluster with the emulated API server and node emulator
// (`testcluster.sh up N --kubernetes`, tests/k8s/), driven by the real kubectl, as a user would
// from the control namespace (issue 31). Pods taken by label selector train to the same final
// loss as the same job on the cluster's SSH hosts; a pod deleted mid-run is a lost host whose
// ranks a spare pod takes, and its processes are gone; at the end nothing of the run is left on
// any host. Skips (exit 77) where the emulator, kubectl or the cluster is unavailable.

#include <doctest/doctest.h>

#include <algorithm>
#include <sstream>

#include "launcher/spec/kubernetes_pods.h"
#include "tests/integration/cluster_job.h"

using namespace dtrain::testing;

namespace {

constexpr const char* kPodLabel = "dtrain-e2e";

#define DTRAIN_REQUIRE_KUBERNETES()                                                                \
  do {                                                                                             \
    if (std::string why = TestCluster::kubernetes_skip_reason(); !why.empty()) skip_test(why);     \
  } while (0)

// One plain pod per cluster host (nodeName pins it there), holding its slot with sleep: the
// "pods that exist" a platform's StatefulSet or JobSet would have made.
std::string pods_manifest(const TestCluster& cluster, int count, const std::string& group) {
  nlohmann::json list = {{"apiVersion", "v1"}, {"kind", "List"}, {"items", nlohmann::json::array()}};
  for (int i = 0; i < count; ++i) {
    nlohmann::json pod = {
        {"apiVersion", "v1"},
        {"kind", "Pod"},
        {"metadata", {{"name", group + "-" + std::to_string(i)}, {"labels", {{"app", kPodLabel}, {"group", group}}}}},
        {"spec",
         {{"nodeName", cluster.host(i + 1).name},
          {"restartPolicy", "Never"},
          {"terminationGracePeriodSeconds", 1},
          {"containers", nlohmann::json::array({{{"name", "main"}, {"image", "debian"}, {"command", {"sleep", "infinity"}}}})}}}};
    list["items"].push_back(pod);
  }
  return list.dump(2);
}

// Creates the pods and waits (bounded) until every one is Running and Ready, through the calls
// dtrain itself makes (get pods -o json). --validate=false: the emulator's OpenAPI stub has no
// schema for a v1 List, which is what this manifest is.
void create_pods(const TestCluster& cluster, int count, const std::string& group) {
  std::string path = cluster.state_dir() + "/pods-" + group + ".json";
  write_text(path, pods_manifest(cluster, count, group));
  CommandOutput created = cluster.exec("ctl", {"sh", "-c", "kubectl --kubeconfig \"$0\" --cache-dir \"$3\" -n \"$1\" create --validate=false -f - < \"$2\"",
                                               cluster.kubeconfig(), cluster.kube_namespace(), path,
                                               cluster.kube_cache_dir()});
  REQUIRE_MESSAGE(created.status == 0, created.output);
  std::string last;
  bool running = wait_until([&] {
    CommandOutput listed = cluster.kubectl({"get", "pods", "-l", "group=" + group, "-o", "json"});
    auto pods = dtrain::spec::parse_pod_list(listed.output);
    if (!pods) return false;
    int ready = 0;
    last.clear();
    for (const auto& pod : pods->pods) {
      std::string why = dtrain::spec::pod_unusable_reason(pod);
      if (why.empty()) ++ready;
      else last += pod.name + " " + why + "\n";
    }
    return ready == count;
  }, 60000);
  REQUIRE_MESSAGE(running, "pods not running after 60 s:\n" << last);
}

void delete_pods(const TestCluster& cluster, const std::string& group) {
  cluster.kubectl({"delete", "pod", "-l", "group=" + group, "--grace-period=1", "--wait=false"});
}

// The spec of a job on the pods of `group`: as cluster_spec_yaml writes one for SSH hosts, with
// hosts: kubernetes instead of the host list.
std::string kubernetes_spec(const TestCluster& cluster, const std::string& name, const std::string& group,
                            const std::string& command, int spares, const std::string& extra) {
  std::ostringstream yaml;
  yaml << "version: 1\nname: " << name << "\nhosts: kubernetes\nslots_per_host: 2\n"
       << "kubernetes:\n  namespace: " << cluster.kube_namespace() << "\n  selector: group=" << group
       << "\n  container: main\n  kubeconfig: " << cluster.kubeconfig() << "\n  spares: " << spares << "\n"
       << "ssh: {remote_dtrain: " << DTRAIN_EXE << "}\n"
       << "worker:\n  command: " << command << "\n  backend: gloo\n"
       << "heartbeat: {interval: 200ms, timeout: 2s, hang_timeout: 10s}\nstop_grace: 2s\n"
       << extra;
  return yaml.str();
}

}  // namespace

TEST_CASE("3 pods by selector train to the same final loss as 3 SSH hosts - nothing left after") {
  DTRAIN_REQUIRE_KUBERNETES();
  TestCluster cluster(3, TestCluster::kubernetes_options());
  DTRAIN_REQUIRE_CLUSTER(cluster);
  const std::string batch = "batch: {global: 24, micro: 2}\n";

  ClusterJob over_ssh(cluster, "ssh");
  ClusterSpec ssh_spec;
  ssh_spec.name = "ssh";
  ssh_spec.command = trainer_command(100);
  ssh_spec.extra = batch;
  over_ssh.write_spec(ssh_spec);
  REQUIRE(over_ssh.run());
  INFO(over_ssh.err());
  REQUIRE(over_ssh.exit_code() == 0);
  std::string expected = final_line(over_ssh.rank_log(0));
  REQUIRE(expected.find("final step=100") != std::string::npos);

  create_pods(cluster, 3, "sel");
  ClusterJob in_pods(cluster, "pods");
  in_pods.write_spec_text(kubernetes_spec(cluster, "pods", "sel", trainer_command(100), 0, batch));
  REQUIRE(in_pods.run({}, 120000));
  INFO(in_pods.err());
  REQUIRE(in_pods.exit_code() == 0);
  for (int rank = 0; rank < 6; ++rank) CHECK(final_line(in_pods.rank_log(rank)) == expected);
  nlohmann::json plan = in_pods.plan(0);
  REQUIRE(plan["ranks"].size() == 6);
  CHECK(plan["ranks"][0]["host"] == "sel-0");
  CHECK(plan["ranks"][5]["host"] == "sel-2");
  // Every call went to the emulated API server through kubectl: exec into each pod, the watch.
  std::string requests = TestCluster::read_text(cluster.kube_requests());
  CHECK(requests.find("sel-0") != std::string::npos);
  CHECK(requests.find("watch") != std::string::npos);

  delete_pods(cluster, "sel");
  check_nothing_left(cluster, in_pods, 15000);
}

TEST_CASE("a pod deleted mid-run is a lost host: a spare pod takes its ranks, its processes are gone") {
  DTRAIN_REQUIRE_KUBERNETES();
  TestCluster cluster(4, TestCluster::kubernetes_options());
  DTRAIN_REQUIRE_CLUSTER(cluster);
  create_pods(cluster, 4, "loss");
  ClusterJob job(cluster, "loss");
  std::string spec = kubernetes_spec(cluster, "loss", "loss", trainer_command(400), 1,
                                     "batch: {global: 24, micro: 2}\nelastic: {min_hosts: 2, max_restarts: 1}\n");
  job.write_spec_text(spec + "checkpoint: {dir: " + job.checkpoint_dir() + ", interval_steps: 50, keep: 3}\n");
  job.start();
  REQUIRE(job.wait_exec());
  REQUIRE(job.wait_checkpoint(50, 60000));

  CommandOutput deleted = cluster.kubectl({"delete", "pod", "loss-1", "--grace-period=1", "--wait=false"});
  REQUIRE_MESSAGE(deleted.status == 0, deleted.output);
  REQUIRE(job.wait(180000));
  INFO(job.err());
  CHECK(job.exit_code() == 0);

  std::vector<nlohmann::json> lost = job.events("host.lost");
  REQUIRE(lost.size() == 1);
  CHECK(lost[0]["host"] == "loss-1");
  // Seen by the pod watch, not by a heartbeat timeout.
  CHECK(lost[0].value("reason", "").find("pod loss-1") != std::string::npos);
  nlohmann::json replanned = job.plan(1);
  bool spare_used = false;
  for (const auto& rank : replanned["ranks"]) {
    CHECK(rank["host"] != "loss-1");
    spare_used = spare_used || rank["host"] == "loss-3";
  }
  CHECK(spare_used);
  CHECK(final_line(job.rank_log(0)).find("final step=400") != std::string::npos);
  // The deleted pod ran alone on host 2: no process of the run is left there.
  std::string left_on_lost;
  wait_until([&] {
    left_on_lost.clear();
    std::vector<pid_t> on_host = cluster.pids_on(2);
    for (int pid : processes_of_run(job.run_id())) {
      if (std::find(on_host.begin(), on_host.end(), pid) != on_host.end()) left_on_lost += std::to_string(pid) + " ";
    }
    return left_on_lost.empty();
  }, 10000);
  CHECK_MESSAGE(left_on_lost.empty(), "run processes left on the deleted pod's host: " << left_on_lost);

  delete_pods(cluster, "loss");
  check_nothing_left(cluster, job, 15000);
}
