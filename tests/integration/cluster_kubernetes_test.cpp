// hosts: kubernetes on the namespace cluster with the emulated API server and node emulator
// (`testcluster.sh up N --kubernetes`, tests/k8s/), driven by the real kubectl, as a user would
// from the control namespace (issue 31). Pods taken by label selector train to the same final
// loss as the same job on the cluster's SSH hosts; a pod deleted mid-run is a lost host whose
// ranks a spare pod takes, and its processes are gone; at the end nothing of the run is left on
// any host. Pods dtrain creates itself (kubernetes.job: an Indexed Job and a headless Service)
// train to that loss too, are deleted at the end, at a preemption (SIGTERM to dtrain) and when
// they never start, and nothing of them is left in the API server. Where the JobSet CRD is
// installed, kind auto makes that a JobSet: its pods train, a deleted one's ranks go to the spare,
// and deleting the JobSet alone takes its Job, Service and pods; kind jobset without the CRD
// fails before anything is created. Skips (exit 77) where the emulator, kubectl or the cluster is
// unavailable.

#include <doctest/doctest.h>

#include <algorithm>
#include <map>
#include <sstream>

#include "launcher/spec/kubernetes_pods.h"
#include "tests/integration/cluster_job.h"

using namespace dtrain::testing;

namespace {

constexpr const char* kPodLabel = "dtrain-e2e";
// The batch of the jobs compared with their run on SSH hosts (6 ranks: 3 hosts or pods, 2 slots).
constexpr const char* kBatch = "batch: {global: 24, micro: 2}\n";

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

// The spec of a job on pods dtrain creates (kubernetes.job `job_block`). preempt_grace is the
// pods' terminationGracePeriodSeconds: their `sleep` ignores SIGTERM, so a deleted pod ends
// after that grace, which is kept short here.
std::string created_job_spec(const TestCluster& cluster, const std::string& name, const std::string& job_block,
                             const std::string& command, const std::string& extra,
                             const std::string& worker_extra = "", const std::string& pod_timeout = "60s") {
  std::ostringstream yaml;
  yaml << "version: 1\nname: " << name << "\nhosts: kubernetes\nslots_per_host: 2\n"
       << "kubernetes:\n  namespace: " << cluster.kube_namespace() << "\n  kubeconfig: " << cluster.kubeconfig()
       << "\n  pod_timeout: " << pod_timeout << "\n  job: " << job_block << "\n"
       << "ssh: {remote_dtrain: " << DTRAIN_EXE << "}\n"
       << "worker:\n  command: " << command << "\n  backend: gloo\n" << worker_extra
       << "heartbeat: {interval: 200ms, timeout: 2s, hang_timeout: 10s}\nstop_grace: 2s\npreempt_grace: 3s\n"
       << extra;
  return yaml.str();
}

// What the API server still holds of `resources` ("jobs,services,pods") of `selector` (""
// for all in the namespace): "job/x", "service/x", "pod/x" lines, polled (bounded) until there
// is nothing; a deleted pod lasts its grace period.
std::string kubernetes_left(const TestCluster& cluster, const std::string& resources, const std::string& selector,
                            int64_t timeout_ms) {
  std::string left;
  std::vector<std::string> get{"get", resources, "-o", "name"};
  if (!selector.empty()) get.insert(get.end(), {"-l", selector});
  wait_until([&] {
    CommandOutput listed = cluster.kubectl(get);
    left = listed.status == 0 ? std::string(dtrain::trim(listed.output)) : "kubectl get failed: " + listed.output;
    return left.empty();
  }, timeout_ms);
  return left;
}

// Nothing of `job`'s run is left: no object of its label in the API server, no process on any
// host (its pods are gone).
void check_run_gone(const TestCluster& cluster, ClusterJob& job) {
  std::string left = kubernetes_left(cluster, "jobs,services,pods", "dtrain.io/run=" + job.run_id(), 30000);
  CHECK_MESSAGE(left.empty(), "left in the API server: " << left);
  check_nothing_left(cluster, job, 15000);
}

// The requests the API server recorded with `method` on the path `target` (with a trailing '/':
// on any path under it).
int requests_to(const TestCluster& cluster, const std::string& method, const std::string& target) {
  std::istringstream lines(TestCluster::read_text(cluster.kube_requests()));
  int count = 0;
  for (std::string line; std::getline(lines, line);) {
    nlohmann::json request = nlohmann::json::parse(line, nullptr, false);
    if (!request.is_object()) continue;
    std::string path = request.value("path", "");
    bool under = !target.empty() && target.back() == '/' && path.rfind(target, 0) == 0;
    if (request.value("method", "") == method && (path == target || under)) {
      ++count;
    }
  }
  return count;
}

// The run's kubernetes.created and kubernetes.deleted: one of each, the deletion without an
// error and before run.finished; the Job and its Service were deleted by name.
void check_created_and_deleted(const TestCluster& cluster, ClusterJob& job, const std::string& why) {
  std::vector<nlohmann::json> created = job.events("kubernetes.created");
  REQUIRE(created.size() == 1);
  const std::string name = created[0]["job"];
  CHECK(created[0]["service"] == name);
  CHECK(created[0]["namespace"] == cluster.kube_namespace());
  CHECK(created[0]["selector"] == "dtrain.io/run=" + job.run_id() + ",dtrain.io/job=" + name);
  std::vector<nlohmann::json> deleted = job.events("kubernetes.deleted");
  REQUIRE(deleted.size() == 1);
  CHECK(deleted[0]["job"] == name);
  CHECK_MESSAGE(!deleted[0].contains("error"), deleted[0].dump());
  CHECK_MESSAGE(deleted[0].value("why", "").find(why) != std::string::npos, deleted[0].dump());
  std::vector<nlohmann::json> all = job.events();
  auto at = [&](const char* name) {
    return std::find_if(all.begin(), all.end(), [&](const nlohmann::json& e) { return e.value("ev", "") == name; });
  };
  CHECK(at("kubernetes.deleted") < at("run.finished"));
  const std::string path = "/namespaces/" + cluster.kube_namespace();
  CHECK(requests_to(cluster, "POST", "/apis/batch/v1" + path + "/jobs") == 1);
  CHECK(requests_to(cluster, "POST", "/api/v1" + path + "/services") == 1);
  CHECK(requests_to(cluster, "DELETE", "/apis/batch/v1" + path + "/jobs/" + name) == 1);
  CHECK(requests_to(cluster, "DELETE", "/api/v1" + path + "/services/" + name) == 1);
}

// The final line of rank 0 of the same `steps`-step job on the cluster's hosts 1-3 over SSH (2
// slots each): what a job on as many pods must end with.
std::string ssh_reference_line(const TestCluster& cluster, int steps = 100) {
  ClusterJob over_ssh(cluster, "ssh");
  ClusterSpec ssh_spec;
  ssh_spec.name = "ssh";
  ssh_spec.command = trainer_command(steps);
  ssh_spec.extra = kBatch;
  over_ssh.write_spec(ssh_spec);
  REQUIRE(over_ssh.run());
  INFO(over_ssh.err());
  REQUIRE(over_ssh.exit_code() == 0);
  std::string expected = final_line(over_ssh.rank_log(0));
  REQUIRE(expected.find("final step=" + std::to_string(steps)) != std::string::npos);
  return expected;
}

// Starts `job` from `spec` with checkpoints every 50 steps and returns once the first is
// committed: a run on pods that is mid-training, for a fault to land in.
void start_until_first_checkpoint(ClusterJob& job, const std::string& spec) {
  job.write_spec_text(spec + "checkpoint: {dir: " + job.checkpoint_dir() + ", interval_steps: 50, keep: 3}\n");
  job.start();
  REQUIRE(job.wait_exec());
  REQUIRE_MESSAGE(job.wait_checkpoint(50, 120000), job.err());
}

// Starts `job` (spec name `name`) on 4 pods dtrain creates (`kind_block`: "" or "kind: ..., "): 3 train, the 4th
// (index 3) is a spare; paced so that it still trains after a pod is lost.
void start_with_spare_pod(const TestCluster& cluster, ClusterJob& job, const std::string& name,
                          const std::string& kind_block) {
  std::string spec = created_job_spec(cluster, name, "{" + kind_block + "image: debian, pods: 4}",
                                      trainer_command(1500),
                                      std::string(kBatch) + "elastic: {min_hosts: 2, max_restarts: 1}\n",
                                      "  env: {DTRAIN_FAULT_SLOW_RANK: \"0:5\"}\n");
  spec.replace(spec.find("  pod_timeout:"), 0, "  spares: 1\n");
  start_until_first_checkpoint(job, spec);
}

// The run's pods that are not terminating, by completion index.
std::map<std::string, std::string> live_pods_by_index(const TestCluster& cluster, const std::string& run_id) {
  std::map<std::string, std::string> pods;
  CommandOutput listed = cluster.kubectl({"get", "pods", "-l", "dtrain.io/run=" + run_id, "-o", "json"});
  nlohmann::json list = nlohmann::json::parse(listed.output, nullptr, false);
  if (!list.is_object()) return pods;
  for (const auto& pod : list["items"]) {
    if (pod["metadata"].contains("deletionTimestamp")) continue;
    pods[pod["metadata"]["labels"].value("batch.kubernetes.io/job-completion-index", "?")] = pod["metadata"]["name"];
  }
  return pods;
}

// After start_with_spare_pod and `victim` deleted: the run succeeds, losing `victim` alone, and
// `spare` runs its ranks to the last step.
void check_spare_took_over(ClusterJob& job, const std::string& victim, const std::string& spare) {
  REQUIRE(job.wait(240000));
  INFO(job.err());
  CHECK(job.exit_code() == 0);
  std::vector<nlohmann::json> lost = job.events("host.lost");
  REQUIRE(lost.size() == 1);
  CHECK(lost[0]["host"] == victim);
  nlohmann::json replanned = job.plan(1);
  bool spare_used = false;
  for (const auto& rank : replanned["ranks"]) {
    CHECK(rank["host"] != victim);
    spare_used = spare_used || rank["host"] == spare;
  }
  CHECK(spare_used);
  CHECK(replanned["world_size"] == 6);
  CHECK(final_line(job.rank_log(0)).find("final step=1500") != std::string::npos);
}

}  // namespace

TEST_CASE("3 pods by selector train to the same final loss as 3 SSH hosts - nothing left after") {
  DTRAIN_REQUIRE_KUBERNETES();
  TestCluster cluster(3, TestCluster::kubernetes_options());
  DTRAIN_REQUIRE_CLUSTER(cluster);
  std::string expected = ssh_reference_line(cluster);

  create_pods(cluster, 3, "sel");
  ClusterJob in_pods(cluster, "pods");
  in_pods.write_spec_text(kubernetes_spec(cluster, "pods", "sel", trainer_command(100), 0, kBatch));
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

TEST_CASE("3 pods dtrain creates (kubernetes.job) train to the same final loss as 3 SSH hosts - then are deleted") {
  DTRAIN_REQUIRE_KUBERNETES();
  TestCluster cluster(3, TestCluster::kubernetes_options());
  DTRAIN_REQUIRE_CLUSTER(cluster);
  std::string expected = ssh_reference_line(cluster);

  ClusterJob in_pods(cluster, "created");
  in_pods.write_spec_text(created_job_spec(cluster, "created", "{image: debian, pods: 3}", trainer_command(100), kBatch));
  REQUIRE(in_pods.run({}, 180000));
  INFO(in_pods.err());
  REQUIRE(in_pods.exit_code() == 0);
  for (int rank = 0; rank < 6; ++rank) CHECK(final_line(in_pods.rank_log(rank)) == expected);
  const std::string name = in_pods.events("kubernetes.created").at(0)["job"];
  nlohmann::json plan = in_pods.plan(0);
  REQUIRE(plan["ranks"].size() == 6);
  // The Job's pods, in completion-index order: <job>-<index>-<random>.
  CHECK(plan["ranks"][0]["host"].get<std::string>().rfind(name + "-0-", 0) == 0);
  CHECK(plan["ranks"][5]["host"].get<std::string>().rfind(name + "-2-", 0) == 0);
  check_created_and_deleted(cluster, in_pods, "the run ended (succeeded)");
  // spec.yaml keeps the template (a resume creates fresh pods), not these pods.
  std::string kept = TestCluster::read_text(in_pods.run_dir() + "/spec.yaml");
  CHECK(kept.find("hosts: kubernetes") != std::string::npos);
  CHECK_MESSAGE(kept.find("image: \"debian\"") != std::string::npos, kept);
  CHECK_MESSAGE(kept.find(name + "-0-") == std::string::npos, kept);  // no pod as a host

  check_run_gone(cluster, in_pods);
}

TEST_CASE("SIGTERM to dtrain on pods it created: a checkpoint is saved, the run ends preempted, the pods are deleted - resume makes fresh ones") {
  DTRAIN_REQUIRE_KUBERNETES();
  TestCluster cluster(2, TestCluster::kubernetes_options());
  DTRAIN_REQUIRE_CLUSTER(cluster);
  ClusterJob job(cluster, "preempt");
  // Paced (rank 0 works 10 ms more a step) so that it still trains when the SIGTERM comes.
  std::string spec = created_job_spec(cluster, "preempt", "{image: debian, pods: 2}", trainer_command(3000),
                                      "batch: {global: 8, micro: 2}\n", "  env: {DTRAIN_FAULT_SLOW_RANK: \"0:10\"}\n");
  start_until_first_checkpoint(job, spec);
  REQUIRE(::kill(job.pid(), SIGTERM) == 0);
  REQUIRE(job.wait(120000));
  INFO(job.err());
  CHECK(job.exit_code() == 6);
  nlohmann::json state = nlohmann::json::parse(TestCluster::read_text(job.run_dir() + "/state.json"), nullptr, false);
  CHECK(state["state"] == "preempted");

  std::vector<nlohmann::json> requested = job.events("checkpoint.requested");
  REQUIRE(requested.size() == 1);
  CHECK_MESSAGE(requested[0].value("reason", "").find("received SIGTERM (preemption)") != std::string::npos,
                requested[0].dump());
  int64_t asked = requested[0]["step"].get<int64_t>();
  bool saved = false;
  for (const auto& committed : job.events("checkpoint.committed")) saved = saved || committed["step"].get<int64_t>() >= asked;
  CHECK_MESSAGE(saved, "no checkpoint at or after step " << asked);
  std::vector<nlohmann::json> stop = job.events("run.stop_requested");
  REQUIRE(stop.size() == 1);
  CHECK_MESSAGE(stop[0].value("reason", "").find("saved by every rank") != std::string::npos, stop[0].dump());
  CHECK(job.events("failure.detected").empty());
  check_created_and_deleted(cluster, job, "the run ended (preempted)");
  check_run_gone(cluster, job);

  // dtrain resume creates fresh pods from the kept template (names of their own), finishes the
  // run from the checkpoint, and deletes them too.
  const std::string first = job.events("kubernetes.created").at(0)["job"];
  job.start_dtrain({"resume", job.run_id()});
  REQUIRE(job.wait(180000));
  INFO(job.err());
  CHECK(job.exit_code() == 0);
  std::vector<nlohmann::json> created = job.events("kubernetes.created");
  REQUIRE(created.size() == 2);
  CHECK(created[1]["job"] == first + "-r1");
  std::vector<nlohmann::json> deleted = job.events("kubernetes.deleted");
  REQUIRE(deleted.size() == 2);
  CHECK(deleted[1]["job"] == first + "-r1");
  CHECK_MESSAGE(!deleted[1].contains("error"), deleted[1].dump());
  CHECK(job.events("run.resumed").at(0)["resume_step"].get<int64_t>() >= asked);
  check_run_gone(cluster, job);
  CHECK(final_line(job.rank_log(0)).find("final step=3000") != std::string::npos);
}

TEST_CASE("a pod of the job dtrain created deleted mid-run: only its index fails, a spare pod takes its ranks, no pod is made in its place") {
  DTRAIN_REQUIRE_KUBERNETES();
  TestCluster cluster(4, TestCluster::kubernetes_options());
  DTRAIN_REQUIRE_CLUSTER(cluster);
  ClusterJob job(cluster, "lostpod");
  start_with_spare_pod(cluster, job, "lostpod", "");
  auto pods_by_index = [&] { return live_pods_by_index(cluster, job.run_id()); };
  std::map<std::string, std::string> before = pods_by_index();
  REQUIRE(before.size() == 4);
  const std::string victim = before["1"];
  CommandOutput deleted = cluster.kubectl({"delete", "pod", victim, "--grace-period=1", "--wait=false"});
  REQUIRE_MESSAGE(deleted.status == 0, deleted.output);

  // While the run goes on: the Job failed index 1 alone, made no pod for it, and the others run.
  const std::string name = job.events("kubernetes.created").at(0)["job"];
  std::string failed_indexes;
  wait_until([&] {
    CommandOutput got = cluster.kubectl({"get", "job", name, "-o", "jsonpath={.status.failedIndexes}"});
    failed_indexes = dtrain::trim(got.output);
    return failed_indexes == "1";
  }, 20000);
  CHECK(failed_indexes == "1");
  std::map<std::string, std::string> after;
  wait_until([&] { after = pods_by_index(); return after.size() == 3; }, 20000);
  CHECK(after == std::map<std::string, std::string>{{"0", before["0"]}, {"2", before["2"]}, {"3", before["3"]}});

  check_spare_took_over(job, victim, before["3"]);
  check_created_and_deleted(cluster, job, "the run ended (succeeded)");
  check_run_gone(cluster, job);
}

TEST_CASE("with elastic.in_place a deleted pod's ranks move to the spare pod in place: the survivors keep their processes, 0 steps lost, the same final loss") {
  DTRAIN_REQUIRE_KUBERNETES();
  TestCluster cluster(4, TestCluster::kubernetes_options());
  DTRAIN_REQUIRE_CLUSTER(cluster);
  std::string expected = ssh_reference_line(cluster, 300);
  ClusterJob job(cluster, "inplace");
  // Paced (a sleep that changes no numbers) so that the loss lands mid-run.
  std::string spec = created_job_spec(cluster, "inplace", "{image: debian, pods: 4}", trainer_command(300),
                                      std::string(kBatch) + "elastic: {in_place: true, max_restarts: 2}\n",
                                      "  env: {DTRAIN_FAULT_SLOW_RANK: \"0:20\"}\n");
  spec.replace(spec.find("  pod_timeout:"), 0, "  spares: 1\n");
  start_until_first_checkpoint(job, spec);
  nlohmann::json first = job.plan(0);
  const std::string victim = first["ranks"][2]["host"];  // index 1: ranks 2 and 3
  CommandOutput deleted = cluster.kubectl({"delete", "pod", victim, "--grace-period=1", "--wait=false"});
  REQUIRE_MESSAGE(deleted.status == 0, deleted.output);
  REQUIRE(job.wait(180000));
  INFO(job.err());
  CHECK(job.exit_code() == 0);

  std::vector<nlohmann::json> completed = job.events("recovery.completed");
  REQUIRE(completed.size() == 1);
  CHECK(completed[0]["action"] == "in-place");
  CHECK(completed[0]["kind"] == "host.lost");
  CHECK(completed[0]["steps_lost"] == 0);
  CHECK(job.events("recovery.fallback").empty());
  // Only the lost pod's two ranks were started again, on the spare pod.
  std::vector<nlohmann::json> started = job.events("worker.started");
  REQUIRE(started.size() == 8);
  for (size_t i = 6; i < started.size(); ++i) {
    CHECK((started[i]["rank"] == 2 || started[i]["rank"] == 3));
    CHECK(started[i]["host"] != victim);
  }
  for (int rank = 0; rank < 6; ++rank) CHECK(final_line(job.rank_log(rank)) == expected);
  check_created_and_deleted(cluster, job, "the run ended (succeeded)");
  check_run_gone(cluster, job);
}

TEST_CASE("--detach on pods dtrain creates: the background supervisor deletes them at the end") {
  DTRAIN_REQUIRE_KUBERNETES();
  TestCluster cluster(2, TestCluster::kubernetes_options());
  DTRAIN_REQUIRE_CLUSTER(cluster);
  ClusterJob detached(cluster, "detached");
  detached.write_spec_text(created_job_spec(cluster, "detached", "{image: debian, pods: 2}", trainer_command(100),
                                            "batch: {global: 8, micro: 2}\n"));
  // The foreground process returns once the run directory exists; the pods outlive it.
  REQUIRE(detached.run({"--detach"}, 120000));
  INFO(detached.err());
  REQUIRE(detached.exit_code() == 0);
  CHECK(std::string(dtrain::trim(detached.out())) == detached.run_id());
  REQUIRE(detached.events("kubernetes.created").size() == 1);
  REQUIRE(wait_until([&] { return !detached.events("run.finished").empty(); }, 120000));
  check_created_and_deleted(cluster, detached, "the run ended (succeeded)");
  check_run_gone(cluster, detached);
  CHECK(detached.events("run.finished").at(0)["state"] == "succeeded");
}

TEST_CASE("pods dtrain creates that never run: a clear error within pod_timeout, no run, nothing left") {
  DTRAIN_REQUIRE_KUBERNETES();
  TestCluster cluster(2, TestCluster::kubernetes_options());
  DTRAIN_REQUIRE_CLUSTER(cluster);
  ClusterJob job(cluster, "nowhere");
  // No node has the label: the pods stay Pending.
  job.write_spec_text(created_job_spec(cluster, "nowhere", "{image: debian, pods: 2, node_selector: {pool: nowhere}}",
                                       trainer_command(10), "", "", "3s"));
  REQUIRE(job.run({}, 60000));
  CHECK(job.exit_code() == 2);
  std::string err = job.err();
  CHECK_MESSAGE(err.find("were not all Running and Ready within kubernetes.pod_timeout (3s)") != std::string::npos, err);
  CHECK_MESSAGE(err.find("is Pending") != std::string::npos, err);
  CHECK_MESSAGE(err.find("were deleted") != std::string::npos, err);
  // No run directory: the submit failed before it made one.
  CHECK(job.out().empty());
  std::string runs = job.dir() + "/home/runs";
  bool any_run = false;
  if (DIR* d = ::opendir(runs.c_str())) {
    while (dirent* entry = ::readdir(d)) {
      std::string name = entry->d_name;
      any_run = any_run || (name != "." && name != "..");
    }
    ::closedir(d);
  }
  CHECK_FALSE(any_run);
  // Nothing of it in the namespace (every object there was made by this test's dtrain).
  std::string left = kubernetes_left(cluster, "jobs,services,pods", "", 30000);
  CHECK_MESSAGE(left.empty(), "left in the API server: " << left);
  // Deleted by the names created, never as a collection.
  const std::string path = "/namespaces/" + cluster.kube_namespace();
  CHECK(requests_to(cluster, "POST", "/apis/batch/v1" + path + "/jobs") == 1);
  CHECK(requests_to(cluster, "DELETE", "/apis/batch/v1" + path + "/jobs/") == 1);
  CHECK(requests_to(cluster, "DELETE", "/api/v1" + path + "/services/") == 1);
  CHECK(requests_to(cluster, "DELETE", "/apis/batch/v1" + path + "/jobs") == 0);
  CHECK(requests_to(cluster, "DELETE", "/api/v1" + path + "/services") == 0);
}

TEST_CASE("where the JobSet CRD is installed, kind auto creates a JobSet: its pods train, a deleted pod's ranks go to the spare, and deleting the JobSet takes its Job, Service and pods") {
  DTRAIN_REQUIRE_KUBERNETES();
  TestCluster cluster(4, TestCluster::kubernetes_jobset_options());
  DTRAIN_REQUIRE_CLUSTER(cluster);
  ClusterJob job(cluster, "jobset");
  start_with_spare_pod(cluster, job, "jobset", "");  // kind auto

  // What dtrain created, while the run trains: the JobSet alone; its controller made the rest.
  std::vector<nlohmann::json> created = job.events("kubernetes.created");
  REQUIRE(created.size() == 1);
  CHECK(created[0]["kind"] == "JobSet");
  const std::string name = created[0]["job"];
  CHECK(created[0]["service"] == name);
  CHECK(created[0]["selector"] == "dtrain.io/run=" + job.run_id() + ",dtrain.io/job=" + name);
  nlohmann::json jobset = nlohmann::json::parse(cluster.kubectl({"get", "jobset", name, "-o", "json"}).output, nullptr, false);
  REQUIRE_MESSAGE(jobset.is_object(), "no JobSet " << name);
  CHECK(jobset["spec"]["replicatedJobs"][0]["name"] == "workers");
  CHECK(jobset["spec"]["failurePolicy"]["maxRestarts"] == 0);
  const std::string child = name + "-workers-0";
  nlohmann::json child_job = nlohmann::json::parse(cluster.kubectl({"get", "job", child, "-o", "json"}).output, nullptr, false);
  REQUIRE_MESSAGE(child_job.is_object(), "no child Job " << child);
  CHECK(child_job["metadata"]["ownerReferences"][0]["kind"] == "JobSet");
  CHECK(child_job["spec"]["backoffLimitPerIndex"] == 0);
  nlohmann::json service = nlohmann::json::parse(cluster.kubectl({"get", "service", name, "-o", "json"}).output, nullptr, false);
  REQUIRE_MESSAGE(service.is_object(), "no Service " << name);
  CHECK(service["spec"]["clusterIP"] == "None");
  CHECK(service["metadata"]["ownerReferences"][0]["kind"] == "JobSet");
  // The pods: found by dtrain's labels, named by the JobSet's child Job, in the Service's subdomain.
  nlohmann::json pods = nlohmann::json::parse(
      cluster.kubectl({"get", "pods", "-l", "dtrain.io/run=" + job.run_id(), "-o", "json"}).output, nullptr, false);
  REQUIRE(pods.is_object());
  for (const auto& pod : pods["items"]) {
    const std::string index = pod["metadata"]["labels"].value("batch.kubernetes.io/job-completion-index", "?");
    CHECK(pod["spec"]["hostname"] == child + "-" + index);
    CHECK(pod["spec"]["subdomain"] == name);
    CHECK(pod["metadata"]["labels"].value("jobset.sigs.k8s.io/jobset-name", "") == name);
  }
  std::map<std::string, std::string> by_index = live_pods_by_index(cluster, job.run_id());
  REQUIRE(by_index.size() == 4);
  CHECK(job.plan(0)["ranks"][0]["host"] == by_index["0"]);

  const std::string victim = by_index["1"];
  CommandOutput deleted = cluster.kubectl({"delete", "pod", victim, "--grace-period=1", "--wait=false"});
  REQUIRE_MESSAGE(deleted.status == 0, deleted.output);
  check_spare_took_over(job, victim, by_index["3"]);

  // Deleted at the end: the JobSet alone, by name; nothing of it is left.
  std::vector<nlohmann::json> gone = job.events("kubernetes.deleted");
  REQUIRE(gone.size() == 1);
  CHECK(gone[0]["kind"] == "JobSet");
  CHECK(gone[0]["job"] == name);
  CHECK_MESSAGE(!gone[0].contains("error"), gone[0].dump());
  const std::string path = "/namespaces/" + cluster.kube_namespace();
  CHECK(requests_to(cluster, "POST", "/apis/jobset.x-k8s.io/v1alpha2" + path + "/jobsets") == 1);
  CHECK(requests_to(cluster, "DELETE", "/apis/jobset.x-k8s.io/v1alpha2" + path + "/jobsets/" + name) == 1);
  CHECK(requests_to(cluster, "POST", "/apis/batch/v1" + path + "/jobs") == 0);
  CHECK(requests_to(cluster, "POST", "/api/v1" + path + "/services") == 0);
  CHECK(requests_to(cluster, "DELETE", "/apis/batch/v1" + path + "/jobs/") == 0);
  CHECK(requests_to(cluster, "DELETE", "/api/v1" + path + "/services/") == 0);
  // Its Service carries no dtrain label (the JobSet controller made it): the whole namespace.
  std::string left = kubernetes_left(cluster, "jobsets,jobs,services", "", 30000);
  CHECK_MESSAGE(left.empty(), "left in the API server: " << left);
  check_run_gone(cluster, job);
}

TEST_CASE("kind jobset where the JobSet CRD is not installed: a clear error naming the fix, nothing created, no run") {
  DTRAIN_REQUIRE_KUBERNETES();
  TestCluster cluster(1, TestCluster::kubernetes_options());
  DTRAIN_REQUIRE_CLUSTER(cluster);
  ClusterJob job(cluster, "nojobset");
  job.write_spec_text(created_job_spec(cluster, "nojobset", "{kind: jobset, image: debian, pods: 1}",
                                       trainer_command(10), "batch: {global: 4, micro: 2}\n"));
  REQUIRE(job.run({}, 60000));
  CHECK(job.exit_code() == 2);
  std::string err = job.err();
  CHECK_MESSAGE(err.find("kubernetes.job.kind: jobset, but the cluster has no JobSet CRD (jobsets.jobset.x-k8s.io)") !=
                    std::string::npos,
                err);
  CHECK_MESSAGE(err.find("namespace '" + cluster.kube_namespace() + "'") != std::string::npos, err);
  CHECK_MESSAGE(err.find("or set kubernetes.job.kind: job") != std::string::npos, err);
  CHECK(job.out().empty());
  CHECK(requests_to(cluster, "POST", "/apis/batch/v1/namespaces/" + cluster.kube_namespace() + "/jobs") == 0);
  CHECK(requests_to(cluster, "POST", "/api/v1/namespaces/" + cluster.kube_namespace() + "/services") == 0);
  CHECK(dtrain::trim(cluster.kubectl({"get", "jobs,services,pods", "-o", "name"}).output).empty());
}
