// kubectl's view of pods, typed at the boundary: PodList and watch events parsed (and refused
// with a reason), the watch stream split into objects, and pods made hosts (order, spares, slots,
// addresses, the messages when none can be used).

#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "launcher/spec/kubernetes_pods.h"

using namespace dtrain;
using namespace dtrain::spec;
using nlohmann::json;

namespace {

// A pod as the API server writes it (more fields than dtrain reads, as in life).
json api_pod(const std::string& name, const std::string& ip, std::optional<int> index = std::nullopt,
             const std::string& phase = "Running", const char* ready = "True") {
  json pod = {{"apiVersion", "v1"},
              {"kind", "Pod"},
              {"metadata", {{"name", name}, {"namespace", "ml"}, {"uid", "1234"}, {"labels", {{"app", "trainer"}}}}},
              {"spec", {{"nodeName", "P-h1"}, {"containers", json::array({{{"name", "main"}, {"image", "debian"}}})}}},
              {"status", {{"phase", phase}, {"podIP", ip}, {"hostIP", ip}, {"qosClass", "BestEffort"},
                          {"conditions", json::array({{{"type", "PodScheduled"}, {"status", "True"}},
                                                      {{"type", "Ready"}, {"status", ready}}})}}}};
  if (index) pod["metadata"]["labels"][kCompletionIndexLabel] = std::to_string(*index);
  return pod;
}

PodList pods_of(const json& items) {
  Result<PodList> list = parse_pod_list(json{{"kind", "List"}, {"apiVersion", "v1"}, {"items", items}}.dump(2));
  REQUIRE_MESSAGE(list.ok(), list.error().message);
  return *list;
}

KubernetesSettings selector(const std::string& text, int spares = 0) {
  KubernetesSettings kube;
  kube.enabled = true;
  kube.namespace_name = "ml";
  kube.selector = text;
  kube.spares = spares;
  return kube;
}

std::vector<std::string> names(const std::vector<HostEntry>& hosts) {
  std::vector<std::string> out;
  for (const HostEntry& host : hosts) out.push_back(host.name + "@" + host.address + "x" + std::to_string(host.slots));
  return out;
}

}  // namespace

TEST_CASE("pods: a PodList is read into what dtrain uses, and prints back to itself") {
  json gpu_pod = api_pod("trainer-0", "10.0.0.5", 0);
  gpu_pod["spec"]["containers"][0]["resources"] = {{"limits", {{kGpuResource, "8"}, {"cpu", "16"}}}};
  gpu_pod["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z";
  PodList list = pods_of(json::array({gpu_pod}));
  REQUIRE(list.pods.size() == 1);
  const Pod& pod = list.pods[0];
  CHECK(pod.name == "trainer-0");
  CHECK(pod.node_name == "P-h1");
  CHECK(pod.phase == "Running");
  CHECK(pod.pod_ip == "10.0.0.5");
  CHECK(pod.ready == true);
  CHECK(pod.deleting);
  CHECK(pod.completion_index() == 0);
  REQUIRE(pod.containers.size() == 1);
  CHECK(pod.containers[0] == PodContainer{"main", 8});
  Result<PodList> again = parse_pod_list(to_json(list).dump());
  REQUIRE(again.ok());
  CHECK(*again == list);
}

TEST_CASE("pods: malformed output is an error that names the field, never a crash") {
  CHECK(parse_pod_list("not json").error().message == "kubectl get pods: not JSON");
  CHECK(parse_pod_list("[1]").error().message.find("expected a JSON object") != std::string::npos);
  CHECK(parse_pod_list(std::string(100, '[') + std::string(100, ']')).error().message ==
        "kubectl get pods: nested deeper than 64 levels");
  json fractional = api_pod("a", "10.0.0.1");
  fractional["spec"]["containers"][0]["resources"]["limits"][kGpuResource] = "0.5";
  std::string message = parse_pod_list(json{{"items", {fractional}}}.dump()).error().message;
  CHECK(message.find("nvidia.com/gpu") != std::string::npos);
  CHECK(message.find("a whole number of GPUs") != std::string::npos);
  json nameless = api_pod("a", "10.0.0.1");
  nameless["metadata"].erase("name");
  CHECK(parse_pod_list(json{{"items", {nameless}}}.dump()).error().message.find("name") != std::string::npos);
}

TEST_CASE("pods: watch events of each type, and an ERROR from the API server") {
  Result<PodWatchEvent> added = parse_pod_watch_event(json{{"type", "ADDED"}, {"object", api_pod("a", "10.0.0.1")}}.dump());
  REQUIRE(added.ok());
  CHECK(added->type == PodWatchEvent::Type::added);
  CHECK(added->pod.name == "a");
  Result<PodWatchEvent> not_ready =
      parse_pod_watch_event(json{{"type", "MODIFIED"}, {"object", api_pod("a", "10.0.0.1", 0, "Running", "False")}}.dump());
  REQUIRE(not_ready.ok());
  CHECK(not_ready->pod.ready == false);
  CHECK(pod_unusable_reason(not_ready->pod) == "is not Ready");
  Result<PodWatchEvent> error =
      parse_pod_watch_event(R"({"type":"ERROR","object":{"kind":"Status","message":"too old resource version"}})");
  REQUIRE(error.ok());
  CHECK(error->type == PodWatchEvent::Type::error);
  CHECK(error->error == "too old resource version");
  CHECK(parse_pod_watch_event(R"({"type":"BOOKED","object":{}})").error().message ==
        "pod watch event: type 'BOOKED' is none of ADDED, MODIFIED, DELETED, ERROR");
  for (const PodWatchEvent& event : {*added, *not_ready, *error}) {
    CHECK(parse_pod_watch_event(to_json(event).dump()).value() == event);
  }
}

TEST_CASE("pods: the watch stream is split into objects however the bytes arrive") {
  json first = {{"type", "ADDED"}, {"object", api_pod("a", "10.0.0.1")}};
  json second = {{"type", "DELETED"}, {"object", api_pod("b}{\"", "10.0.0.2")}};  // braces inside a string
  std::string stream = first.dump(4) + "\n" + second.dump(4) + "\n";
  for (size_t piece : {size_t{1}, size_t{7}, stream.size()}) {
    JsonObjectStream splitter;
    std::vector<std::string> objects;
    for (size_t at = 0; at < stream.size(); at += piece) {
      splitter.append(std::string_view(stream).substr(at, piece));
      while (auto object = splitter.next()) objects.push_back(*object);
    }
    REQUIRE(objects.size() == 2);
    CHECK(parse_pod_watch_event(objects[1]).value().pod.name == "b}{\"");
    CHECK_FALSE(splitter.broken());
  }
  JsonObjectStream garbage;
  garbage.append("error: You must be logged in to the server (Unauthorized)\n");
  CHECK_FALSE(garbage.next().has_value());
  CHECK(garbage.broken());
  CHECK(garbage.problem().find("'error: You must be") != std::string::npos);
}

TEST_CASE("pods → hosts: usable pods in index order, the last ones spares, slots from GPU limits") {
  json gpu = api_pod("job-1-abcde", "10.0.0.2", 1);
  gpu["spec"]["containers"][0]["resources"] = {{"limits", {{kGpuResource, "4"}}}};
  PodList list = pods_of(json::array({api_pod("job-2-xyz", "10.0.0.3", 2), gpu, api_pod("job-0-qqq", "10.0.0.1", 0),
                                      api_pod("job-3-pend", "", 3, "Pending", "False")}));
  Result<KubernetesHosts> hosts = hosts_from_pods(list, selector("app=trainer", 1), 2);
  REQUIRE_MESSAGE(hosts.ok(), hosts.error().message);
  CHECK(names(hosts->hosts) == std::vector<std::string>{"job-0-qqq@10.0.0.1x2", "job-1-abcde@10.0.0.2x4"});
  CHECK(names(hosts->spares) == std::vector<std::string>{"job-2-xyz@10.0.0.3x2"});
  CHECK(hosts->spares[0].spare);
  CHECK(hosts->left_out == std::vector<std::string>{"job-3-pend is Pending"});
}

TEST_CASE("pods → hosts: no pods, none usable, too few for the spares, a missing container") {
  CHECK(hosts_from_pods(PodList{}, selector("app=x"), 1).error().message ==
        "no pod matches namespace 'ml', selector 'app=x'; check the selector with kubectl get pods -l");
  PodList pending = pods_of(json::array({api_pod("a", "", std::nullopt, "Pending", "False")}));
  CHECK(hosts_from_pods(pending, selector("app=x"), 1).error().message ==
        "no pod of namespace 'ml', selector 'app=x' is Running and Ready (a is Pending); wait until they run, or fix "
        "what keeps them from it");
  PodList one = pods_of(json::array({api_pod("a", "10.0.0.1")}));
  CHECK(hosts_from_pods(one, selector("app=x", 1), 1).error().message ==
        "1 usable pod(s) of namespace 'ml', selector 'app=x' leave none to train on beside 1 spare(s); lower "
        "kubernetes.spares or add pods");
  KubernetesSettings sidecar = selector("app=x");
  sidecar.container = "trainer";
  CHECK(hosts_from_pods(one, sidecar, 1).error().message ==
        "pod a of namespace 'ml', selector 'app=x' has no container 'trainer' (it has: main); set "
        "kubernetes.container to one of them");
}

TEST_CASE("pods: which watch events make a host lost") {
  auto event = [](const char* type, json pod) { return parse_pod_watch_event(json{{"type", type}, {"object", pod}}.dump()).value(); };
  CHECK_FALSE(pod_loss_reason(event("ADDED", api_pod("a", "10.0.0.1"))).has_value());
  CHECK(pod_loss_reason(event("DELETED", api_pod("a", "10.0.0.1"))) == "pod a was deleted");
  json deleting = api_pod("a", "10.0.0.1");
  deleting["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z";
  CHECK(pod_loss_reason(event("MODIFIED", deleting)) == "pod a is being deleted");
  CHECK(pod_loss_reason(event("MODIFIED", api_pod("a", "10.0.0.1", 0, "Failed", "False"))) == "pod a ended: Failed");
  json not_ready = api_pod("a", "10.0.0.1", 0, "Running", "False");
  not_ready["status"]["conditions"][1]["reason"] = "NodeNotReady";
  CHECK(pod_loss_reason(event("MODIFIED", not_ready)) == "pod a is not Ready (NodeNotReady)");
  CHECK_FALSE(pod_loss_reason(parse_pod_watch_event(R"({"type":"ERROR","object":{"message":"gone"}})").value()).has_value());
}
