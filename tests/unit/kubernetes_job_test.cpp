// kubernetes.job as data: the names dtrain gives the Indexed Job and headless Service, or the
// JobSet, of a run (valid DNS labels whatever the job's name), their manifests, the spec.yaml a resume creates
// fresh pods from, and what a run log says is still to delete. The kubectl calls themselves run
// against the emulated API server in tests/integration/cluster_kubernetes_test.cpp.

#include <doctest/doctest.h>

#include <regex>

#include "launcher/hosts/kubernetes_job.h"
#include "launcher/run/created_pods.h"
#include "launcher/spec/spec_loader.h"
#include "tests/unit/spec_parse.h"

using namespace dtrain;
using namespace dtrain::hosts;
using nlohmann::json;

namespace {

// A Service name (DNS-1035 label); a Job's too, as dtrain makes them.
bool is_dns_1035_label(const std::string& name) {
  static const std::regex label("[a-z]([-a-z0-9]*[a-z0-9])?");
  return name.size() <= 63 && std::regex_match(name, label);
}

bool is_label_value(const std::string& value) {
  static const std::regex rule("([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?");
  return value.size() <= 63 && std::regex_match(value, rule);
}

// Every name valid, and room for the pods' hostnames `<job>-<highest index>` (in a JobSet
// `<jobset>-workers-0-<highest index>`).
void check_names(const KubernetesJobNames& names, int pods) {
  INFO(names.job);
  CHECK(is_dns_1035_label(names.job));
  CHECK(is_dns_1035_label(names.service));
  CHECK(is_dns_1035_label(names.pods_job()));
  CHECK(is_label_value(names.run_label));
  CHECK((names.pods_job() + "-" + std::to_string(pods - 1)).size() <= 63);
}

spec::JobSpec job_spec(const std::string& job_block) {
  spec::LoadResult loaded = testing::parse_section("hosts: kubernetes\nkubernetes:\n  namespace: ml\n  job: " + job_block +
                                                   "\npreempt_grace: 45s\n");
  REQUIRE_MESSAGE(loaded.ok(), loaded.message());
  return *loaded.spec;
}

const JobCreator kCreator{"llm-20261206-021500-ab12", "alice", "login1", 4242, "0.1.0"};

// apiVersion, kind, name, the run label and the annotations that say who made it.
void check_object(const json& object, const char* api_version, const char* kind, const std::string& name,
                  const KubernetesJobNames& names) {
  CHECK(object["apiVersion"] == api_version);
  CHECK(object["kind"] == kind);
  CHECK(object["metadata"]["name"] == name);
  CHECK(object["metadata"]["labels"]["dtrain.io/run"] == names.run_label);
  CHECK(object["metadata"]["annotations"]["dtrain.io/run-id"] == kCreator.run_id);
  std::string by = object["metadata"]["annotations"]["dtrain.io/created-by"];
  CHECK(by.find("alice@login1 pid 4242") != std::string::npos);
  CHECK(by.find("dtrain 0.1.0") != std::string::npos);
}

}  // namespace

TEST_CASE("kubernetes.job names: a plain run id is the name as it is") {
  KubernetesJobNames names = kubernetes_job_names("llm-20261206-021500-ab12", 0, 4);
  CHECK(names.job == "llm-20261206-021500-ab12");
  CHECK(names.service == names.job);
  CHECK(names.run_label == "llm-20261206-021500-ab12");
  CHECK(names.selector() == "dtrain.io/run=llm-20261206-021500-ab12,dtrain.io/job=llm-20261206-021500-ab12");
  check_names(names, 4);
  // A resume's pods have names of their own: the old ones may still be terminating.
  KubernetesJobNames again = kubernetes_job_names("llm-20261206-021500-ab12", 2, 4);
  CHECK(again.job == "llm-20261206-021500-ab12-r2");
  CHECK(again.run_label == names.run_label);
  CHECK(again.selector() != names.selector());
}

TEST_CASE("kubernetes.job names: odd and long job names still make valid, distinct names") {
  // make_run_id keeps up to 40 characters of the name, with '_' and '.', and adds 21.
  const std::string forty(40, 'X');
  for (const std::string& id : {std::string("_My.Job__v2-20261206-021500-ab12"), std::string("3d-unet-20261206-021500-0000"),
                                std::string("...--__-20261206-021500-ffff"), forty + "-20261206-021500-ab12",
                                std::string("a-20261206-021500-ab12")}) {
    for (int pods : {1, 10, 10'000}) {
      for (int attempt : {0, 1, 123}) {
        INFO(id << " pods=" << pods << " attempt=" << attempt);
        check_names(kubernetes_job_names(id, attempt, pods), pods);
        check_names(kubernetes_job_names(id, attempt, pods, events::KubernetesKind::jobset), pods);
      }
    }
  }
  CHECK(kubernetes_job_names("_My.Job__v2-20261206-021500-ab12", 0, 2).job == "my-job-v2-20261206-021500-ab12");
  CHECK(kubernetes_job_names("_My.Job__v2-20261206-021500-ab12", 0, 2).run_label == "My.Job__v2-20261206-021500-ab12");
  CHECK(kubernetes_job_names("3d-unet-20261206-021500-0000", 0, 2).job == "dt-3d-unet-20261206-021500-0000");
  // Two long ids that differ only at the end: the cut keeps them apart (a hash of the whole id).
  KubernetesJobNames first = kubernetes_job_names(forty + "-20261206-021500-ab12", 0, 10'000);
  KubernetesJobNames second = kubernetes_job_names(forty + "-20261206-021500-ab13", 0, 10'000);
  CHECK(first.job != second.job);
  CHECK(first.job.rfind(std::string(20, 'x'), 0) == 0);  // starts as the id does
}

TEST_CASE("kubernetes.job names of a JobSet: its child Job is <jobset>-workers-0, the same names otherwise") {
  KubernetesJobNames names = kubernetes_job_names("llm-20261206-021500-ab12", 0, 4, events::KubernetesKind::jobset);
  CHECK(names.kind == events::KubernetesKind::jobset);
  CHECK(names.job == "llm-20261206-021500-ab12");
  CHECK(names.service == names.job);
  CHECK(names.pods_job() == "llm-20261206-021500-ab12-workers-0");
  CHECK(names.selector() == "dtrain.io/run=llm-20261206-021500-ab12,dtrain.io/job=llm-20261206-021500-ab12");
  CHECK(kubernetes_job_names("llm-20261206-021500-ab12", 0, 4).pods_job() == names.job);
  // A long id is cut shorter for a JobSet: its pods' hostnames carry "-workers-0" more.
  const std::string forty(40, 'x');
  KubernetesJobNames as_job = kubernetes_job_names(forty + "-20261206-021500-ab12", 0, 100);
  KubernetesJobNames as_jobset = kubernetes_job_names(forty + "-20261206-021500-ab12", 0, 100, events::KubernetesKind::jobset);
  CHECK(as_jobset.job.size() < as_job.job.size());
  CHECK((as_jobset.pods_job() + "-99").size() <= 63);
}

TEST_CASE("label values: cut to 63, starting and ending with a letter or digit") {
  CHECK(label_value("_run.1-") == "run.1");
  CHECK(label_value(std::string(70, 'a')) == std::string(63, 'a'));
  CHECK(label_value("a/b c") == "a-b-c");
  CHECK(label_value("") == "");
}

TEST_CASE("the Indexed Job: pods, restarts, image, GPUs, nodes, tolerations, grace, subdomain, labels") {
  spec::JobSpec spec = job_spec(
      "{image: registry.example.com/trainer:1.0, pods: 4, gpus_per_pod: 8, node_selector: {pool: h100},"
      " tolerations: {not_ready: 45s, unreachable: 1500ms}, command: [sleep, '3600']}");
  KubernetesJobNames names = kubernetes_job_names(kCreator.run_id, 0, 4);
  json job = render_job(spec, names, kCreator);
  check_object(job, "batch/v1", "Job", names.job, names);
  const json& spec_json = job["spec"];
  CHECK(spec_json["completionMode"] == "Indexed");
  CHECK(spec_json["completions"] == 4);
  CHECK(spec_json["parallelism"] == 4);
  // A lost pod fails its own index only: a Job-wide backoffLimit would end every pod of the run.
  CHECK(spec_json["backoffLimitPerIndex"] == 0);
  CHECK(spec_json["maxFailedIndexes"] == 4);
  CHECK_FALSE(spec_json.contains("backoffLimit"));
  const json& pod_template = spec_json["template"];
  CHECK(pod_template["metadata"]["labels"]["dtrain.io/run"] == names.run_label);
  CHECK(pod_template["metadata"]["labels"]["dtrain.io/job"] == names.job);
  const json& pod = pod_template["spec"];
  CHECK(pod["restartPolicy"] == "Never");
  CHECK(pod["subdomain"] == names.service);
  CHECK(pod["terminationGracePeriodSeconds"] == 45);  // preempt_grace
  CHECK(pod["nodeSelector"] == json{{"pool", "h100"}});
  REQUIRE(pod["tolerations"].size() == 2);
  CHECK(pod["tolerations"][0] == json{{"key", "node.kubernetes.io/not-ready"}, {"operator", "Exists"},
                                      {"effect", "NoExecute"}, {"tolerationSeconds", 45}});
  CHECK(pod["tolerations"][1]["key"] == "node.kubernetes.io/unreachable");
  CHECK(pod["tolerations"][1]["tolerationSeconds"] == 2);  // rounded up, never shorter
  REQUIRE(pod["containers"].size() == 1);
  const json& container = pod["containers"][0];
  CHECK(container["name"] == "main");
  CHECK(container["image"] == "registry.example.com/trainer:1.0");
  CHECK(container["command"] == json{"sleep", "3600"});
  CHECK(container["resources"]["limits"]["nvidia.com/gpu"] == "8");
}

TEST_CASE("the Indexed Job without GPUs or a node selector asks for neither, the container is the spec's") {
  spec::JobSpec spec = job_spec("{image: trainer, pods: 2}");
  spec.kubernetes.container = "trainer";
  json job = render_job(spec, kubernetes_job_names("r-1", 0, 2), kCreator);
  const json& pod = job["spec"]["template"]["spec"];
  CHECK_FALSE(pod.contains("nodeSelector"));
  CHECK_FALSE(pod["containers"][0].contains("resources"));
  CHECK(pod["containers"][0]["name"] == "trainer");
  CHECK(pod["containers"][0]["command"] == json{"sleep", "infinity"});
  CHECK(pod["tolerations"][0]["tolerationSeconds"] == 30);  // the template's default
}

TEST_CASE("the headless Service selects this attempt's pods") {
  spec::JobSpec spec = job_spec("{image: trainer, pods: 2}");
  KubernetesJobNames names = kubernetes_job_names(kCreator.run_id, 1, 2);
  json service = render_service(spec, names, kCreator);
  check_object(service, "v1", "Service", names.service, names);
  CHECK(service["spec"]["clusterIP"] == "None");
  CHECK(service["spec"]["selector"] == json{{"dtrain.io/run", names.run_label}, {"dtrain.io/job", names.job}});
}

TEST_CASE("the JobSet: one replicatedJob workers whose template is the Indexed Job, DNS hostnames in the Service's subdomain, no restarts") {
  spec::JobSpec spec = job_spec("{kind: jobset, image: trainer, pods: 3, gpus_per_pod: 8}");
  KubernetesJobNames names = kubernetes_job_names(kCreator.run_id, 0, 3, events::KubernetesKind::jobset);
  json jobset = render_jobset(spec, names, kCreator);
  check_object(jobset, "jobset.x-k8s.io/v1alpha2", "JobSet", names.job, names);
  CHECK(jobset["metadata"]["labels"]["dtrain.io/job"] == names.job);
  const json& spec_json = jobset["spec"];
  REQUIRE(spec_json["replicatedJobs"].size() == 1);
  const json& replicated = spec_json["replicatedJobs"][0];
  CHECK(replicated["name"] == "workers");
  CHECK(replicated["replicas"] == 1);
  // The template is render_job's Job, less its name: the same Indexed Job, labels and all.
  json indexed = render_job(spec, names, kCreator);
  CHECK(replicated["template"]["spec"] == indexed["spec"]);
  json job_metadata = indexed["metadata"];
  job_metadata.erase("name");
  CHECK(replicated["template"]["metadata"] == job_metadata);
  const json& job_spec_json = replicated["template"]["spec"];
  CHECK(job_spec_json["completionMode"] == "Indexed");
  CHECK(job_spec_json["completions"] == 3);
  CHECK(job_spec_json["parallelism"] == 3);
  CHECK(job_spec_json["backoffLimitPerIndex"] == 0);
  CHECK(job_spec_json["maxFailedIndexes"] == 3);
  CHECK(job_spec_json["template"]["metadata"]["labels"]["dtrain.io/job"] == names.job);
  CHECK(job_spec_json["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "8");
  CHECK(spec_json["network"] == json{{"enableDNSHostnames", true}, {"subdomain", names.service}});
  CHECK(spec_json["failurePolicy"] == json{{"maxRestarts", 0}});
}

TEST_CASE("spec.yaml of a created job keeps the template, not the pods: a resume creates fresh ones") {
  spec::JobSpec spec = job_spec("{image: trainer, pods: 2, node_selector: {pool: a}}");
  spec.kubernetes.container = "main";
  spec.hosts = {spec::HostEntry{"r-1-0-abcde", "", 0, 1, {}, false, "10.77.0.11"}};
  spec.spares = {spec::HostEntry{"r-1-1-fghij", "", 0, 1, {}, true, "10.77.0.12"}};
  std::string kept = spec::to_yaml(run::spec_to_keep(spec));
  spec::LoadResult again = spec::parse_job_spec(kept, "spec.yaml", "/specs", {});
  REQUIRE_MESSAGE(again.ok(), (again.message() + "\n" + kept));
  CHECK(again.spec->hosts.empty());
  CHECK(again.spec->spares.empty());
  CHECK(again.spec->kubernetes.job == spec.kubernetes.job);
  CHECK(again.spec->kubernetes.container == "main");
  CHECK(again.spec->preempt_grace == spec.preempt_grace);
}

TEST_CASE("the run log names what is still to delete, and the next attempt's number") {
  auto logged = [](events::Event event) { return LoggedEvent{"2026-12-06T02:15:00.000Z", std::nullopt, std::move(event)}; };
  std::vector<LoggedEvent> log = {
      logged(events::KubernetesCreated{{"ml", "r-1", "r-1", events::KubernetesKind::job},
                                       "dtrain.io/run=r-1,dtrain.io/job=r-1", 2}),
      logged(events::KubernetesDeleted{{"ml", "r-1", "r-1", events::KubernetesKind::job}, "the run ended (preempted)",
                                       std::nullopt}),
      logged(events::KubernetesCreated{{"ml", "r-1-r1", "r-1-r1", events::KubernetesKind::jobset},
                                       "dtrain.io/run=r-1,dtrain.io/job=r-1-r1", 2}),
  };
  run::CreatedObjects found = run::created_objects(log);
  CHECK(found.attempts == 2);
  REQUIRE(found.undeleted.size() == 1);
  CHECK(found.undeleted[0].job == "r-1-r1");
  CHECK(found.undeleted[0].kind == events::KubernetesKind::jobset);  // a resume deletes the JobSet
  // A deletion that failed leaves them to delete.
  log.push_back(logged(events::KubernetesDeleted{{"ml", "r-1-r1", "r-1-r1", events::KubernetesKind::jobset},
                                                 "the run ended (failed)", "forbidden"}));
  CHECK(run::created_objects(log).undeleted.size() == 1);
  log.push_back(logged(events::KubernetesDeleted{{"ml", "r-1-r1", "r-1-r1", events::KubernetesKind::jobset},
                                                 "the run ended (failed)", std::nullopt}));
  CHECK(run::created_objects(log).undeleted.empty());
}
