// The kubectl transport and the pod watch against a fake kubectl (a shell script that records its
// arguments): the exact command lines, bytes both ways through `kubectl exec`, kubectl's failures
// explained, and a pod that turns NotReady reported lost once. The real kubectl against the
// emulated API server is tests/integration/cluster_kubernetes_test.cpp.

#include <doctest/doctest.h>
#include <poll.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <thread>

#include "launcher/run/pod_watch.h"
#include "launcher/transport/kubectl_transport.h"
#include "tests/fakes/fake_kubectl.h"

using namespace dtrain;
using namespace dtrain::transport;
using dtrain::testing::FakeKubectl;

namespace {

KubectlOptions options_for(const FakeKubectl& fake) {
  KubectlOptions options;
  options.kubectl = fake.path;
  options.kubeconfig = "/home/u/.kube/config";
  options.context = "prod";
  options.namespace_name = "ml";
  options.container = "main";
  options.start_timeout_ms = 10'000;
  return options;
}

// Pumps until `done` or 10 s.
template <class Done>
bool pump_until(AgentConnection& connection, Done done) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < deadline) {
    std::vector<pollfd> fds = connection.poll_fds();
    ::poll(fds.data(), fds.size(), 50);
    connection.pump();
    if (done()) return true;
  }
  return false;
}

}  // namespace

TEST_CASE("kubectl: every call starts with the cluster, context and namespace, never a credential") {
  KubectlOptions options;
  options.kubeconfig = "/k";
  options.context = "c";
  options.namespace_name = "ns";
  options.container = "main";
  CHECK(kubectl_exec_argv(options, "pod-0", {"/opt/dtrain", "agent"}) ==
        std::vector<std::string>{"kubectl", "--kubeconfig", "/k", "--context", "c", "-n", "ns", "exec", "-i", "pod-0",
                                 "-c", "main", "--", "/opt/dtrain", "agent"});
  CHECK(kubectl_watch_argv(KubectlOptions{}, "app=x") ==
        std::vector<std::string>{"kubectl", "get", "pods", "-l", "app=x", "-w", "-o", "json", "--output-watch-events"});
}

TEST_CASE("kubectl exec carries the agent's bytes both ways and ends with its exit status") {
  FakeKubectl fake("while [ \"$1\" != -- ]; do shift; done; shift; exec cat\n");
  KubectlTransport transport(options_for(fake));
  auto connection = transport.start_agent({"pod-0", "", 0, "/opt/dtrain"});
  REQUIRE_MESSAGE(connection.ok(), connection.error().message);
  std::string received;
  (*connection)->send("frame bytes\n");
  REQUIRE(pump_until(**connection, [&] { received += (*connection)->take_received(); return received == "frame bytes\n"; }));
  (*connection)->close_input();
  REQUIRE(pump_until(**connection, [&] { return (*connection)->closed(); }));
  CHECK((*connection)->close_reason() == "agent connection through kubectl exec exited with code 0");
  CHECK(fake.args() == "--kubeconfig /home/u/.kube/config --context prod -n ml exec -i pod-0 -c main -- /opt/dtrain agent\n");
  CHECK_FALSE((*connection)->local_pid().has_value());
}

TEST_CASE("kubectl exec refused: the close reason names the missing permission") {
  FakeKubectl fake("echo 'Error from server (Forbidden): pods \"pod-0\" is forbidden: User \"u\" cannot create "
                   "resource \"pods/exec\"' >&2; exit 1\n");
  KubectlTransport transport(options_for(fake));
  auto connection = transport.start_agent({"pod-0", "", 0, "/opt/dtrain"});
  REQUIRE(connection.ok());
  REQUIRE(pump_until(**connection, [&] { return (*connection)->closed(); }));
  std::string reason = (*connection)->close_reason();
  CHECK(reason.find("kubectl exec into pod pod-0 failed: Error from server (Forbidden)") == 0);
  CHECK(reason.find("create on pods/exec") != std::string::npos);
  CHECK(reason.find("namespace 'ml' of context 'prod'") != std::string::npos);
}

TEST_CASE("pod watch: a pod that turns NotReady is lost once, and other pods are not the run's") {
  std::string ready = R"({"type":"ADDED","object":{"metadata":{"name":"a"},"status":{"phase":"Running","podIP":"10.0.0.1","conditions":[{"type":"Ready","status":"True"}]}}})";
  std::string other = R"({"type":"DELETED","object":{"metadata":{"name":"not-ours"}}})";
  std::string gone = "{\n  \"type\": \"MODIFIED\",\n  \"object\": {\"metadata\": {\"name\": \"a\"}, \"status\": {\"phase\": "
                     "\"Running\", \"podIP\": \"10.0.0.1\", \"conditions\": [{\"type\": \"Ready\", \"status\": \"False\", "
                     "\"reason\": \"NodeNotReady\"}]}}\n}";
  FakeKubectl fake("cat <<'EOF'\n" + ready + "\n" + other + "\n" + gone + "\n" + gone + "\nEOF\nexec sleep 30\n");
  run::PodWatch watch(options_for(fake), "app=x", {"a", "b"});
  std::vector<std::string> warnings;
  std::vector<run::LostPod> lost;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (lost.empty() && std::chrono::steady_clock::now() < deadline) {
    for (run::LostPod& pod : watch.poll(0, warnings)) lost.push_back(pod);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  REQUIRE(lost.size() == 1);
  CHECK(lost[0].pod == "a");
  CHECK(lost[0].reason == "pod a is not Ready (NodeNotReady)");
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  CHECK(watch.poll(0, warnings).empty());  // reported once
  CHECK(warnings.empty());
  CHECK(fake.args() == "--kubeconfig /home/u/.kube/config --context prod -n ml get pods -l app=x -w -o json --output-watch-events\n");
  std::optional<pid_t> pid = watch.pid();
  REQUIRE(pid.has_value());
}
