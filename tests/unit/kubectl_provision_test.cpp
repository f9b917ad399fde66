// Provisioning dtrain into pods (kubectl_provision.h): the probe's answer read strictly, the
// decision, and the whole connection against a fake kubectl that runs the command after `--`
// here, so the real probe and copy scripts run with /bin/sh in a temporary $HOME: a first
// connection copies and checks, a second uses the copy, bytes that change on the way are refused
// with the pod's name. The real kubectl and pods: tests/integration/cluster_kubernetes_hosts_test.cpp.

#include <doctest/doctest.h>
#include <poll.h>

#include <unistd.h>

#include <chrono>
#include <fstream>

#include "launcher/base/fd.h"
#include "launcher/transport/kubectl_provision.h"
#include "tests/fakes/fake_kubectl.h"
#include "tests/scoped_variable.h"

using namespace dtrain;
using namespace dtrain::transport;
using dtrain::testing::FakeKubectl;
using dtrain::testing::ScopedVariable;

namespace {

const std::string kSha(64, 'a');

// Runs the command after "--" here, as kubectl runs it in a pod. `corrupt`: the copy's input gets
// one byte more at the front, so it reads the binary less its last byte (same size, other bytes).
std::string run_after_dashes(bool corrupt = false) {
  std::string script = "while [ \"$1\" != -- ]; do shift; done; shift\n";
  if (corrupt) {
    script += "n=$(printf '%s' \"$*\" | sed -n 's/.*head -c \\([0-9]*\\) .*/\\1/p')\n"
              "if [ -n \"$n\" ]; then { printf X; head -c $((n - 1)); } | \"$@\"; exit $?; fi\n";
  }
  return script + "exec \"$@\"\n";
}

// A tiny "dtrain": as an agent it says hello and echoes its input.
std::string write_agent(const std::string& dir) {
  std::string path = dir + "/agent-binary";
  std::ofstream(path) << "#!/bin/sh\necho hello-from-agent\nexec cat\n";
  return path;
}

KubectlOptions options_for(const FakeKubectl& fake) {
  KubectlOptions options;
  options.kubectl = fake.path;
  options.namespace_name = "ml";
  options.start_timeout_ms = 10'000;
  options.provision_timeout_ms = 10'000;
  options.dtrain_version = "9.9.9-test";
  options.local_binary = write_agent(fake.dir);
  return options;
}

std::unique_ptr<AgentConnection> connect(const KubectlOptions& options, const std::shared_ptr<KubectlProvisioning>& shared) {
  Result<std::unique_ptr<AgentConnection>> connection = KubectlProvisioningConnection::start("pod-0", options, shared);
  REQUIRE(connection);
  return std::move(*connection);
}

// Pumps until `connection` received `wanted` or closed (10 s at most); returns what it received.
std::string pump_for(AgentConnection& connection, const std::string& wanted) {
  std::string received;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < deadline && !connection.closed()) {
    std::vector<pollfd> fds = connection.poll_fds();
    ::poll(fds.data(), fds.size(), 50);
    connection.pump();
    received += connection.take_received();
    if (received.find(wanted) != std::string::npos) break;
  }
  return received;
}

}  // namespace

TEST_CASE("the probe's answer is read strictly") {
  Result<PodProbe> probe = parse_pod_probe("os Linux x86_64\ndir /root/.cache/dtrain/1.0\nsha " + kSha + "\n");
  REQUIRE(probe);
  CHECK(*probe == PodProbe{"Linux x86_64", "/root/.cache/dtrain/1.0", kSha});
  // No copy yet, or no writable directory.
  CHECK(parse_pod_probe("os Linux x86_64\ndir /tmp/dtrain-0/1.0\n")->cached_sha256.empty());
  CHECK(parse_pod_probe("os Linux x86_64\ndir \n")->cache_dir.empty());
  // A copy whose sum could not be taken (no sha256sum) is not trusted.
  CHECK(parse_pod_probe("os Linux x86_64\ndir /d\nsha \n")->cached_sha256.empty());
  CHECK(!parse_pod_probe(""));
  CHECK(!parse_pod_probe("dir /d\n"));
  CHECK(!parse_pod_probe("os Linux x86_64\n"));
  CHECK(!parse_pod_probe("os Linux x86_64\ndir relative/path\n"));
  CHECK(!parse_pod_probe("os Linux x86_64\ndir /d\x1b[2J\n"));
  CHECK(!parse_pod_probe("os Linux x86_64\ndir /d\nsha 1234\n"));
  CHECK(!parse_pod_probe("os Linux x86_64\ndir /d\nsha " + std::string(64, 'G') + "\n"));
  CHECK(!parse_pod_probe(std::string(20000, 'x')));
}

TEST_CASE("a cached copy with this sha256 is used - otherwise a copy, on the same OS only") {
  PodProbe probe{"Linux x86_64", "/root/.cache/dtrain/1.0", kSha};
  Result<ProvisionDecision> cached = decide_provisioning(probe, "Linux x86_64", kSha, "pod-0");
  REQUIRE(cached);
  CHECK(!cached->copy);
  CHECK(cached->path == "/root/.cache/dtrain/1.0/dtrain");
  Result<ProvisionDecision> stale = decide_provisioning(probe, "Linux x86_64", std::string(64, 'b'), "pod-0");
  REQUIRE(stale);
  CHECK(stale->copy);
  // The cached copy is this binary: no copy, so the OS does not matter.
  CHECK(decide_provisioning(probe, "Linux aarch64", kSha, "pod-0"));
  Result<ProvisionDecision> other_os = decide_provisioning(probe, "Linux aarch64", std::string(64, 'b'), "pod-0");
  REQUIRE(!other_os);
  CHECK(other_os.error().message.find("pod-0: provisioning: the container runs 'Linux x86_64'") == 0);
  CHECK(other_os.error().message.find("ssh.remote_dtrain") != std::string::npos);
  Result<ProvisionDecision> nowhere = decide_provisioning({"Linux x86_64", "", ""}, "Linux x86_64", kSha, "pod-0");
  REQUIRE(!nowhere);
  CHECK(nowhere.error().message.find("pod-0: provisioning: no directory in the container") == 0);
}

TEST_CASE("the copy reads exactly the binary's size and answers with the sha256 it computed") {
  std::string script = pod_upload_script("/root/.cache/dtrain/1.0", 1234, kSha);
  CHECK(script.find("head -c 1234 >") != std::string::npos);
  CHECK(script.find(kSha) != std::string::npos);
  CHECK(read_upload_answer("ok " + kSha + "\n") == kSha);
  CHECK(!read_upload_answer("ok 123\n"));
  CHECK(!read_upload_answer("fine " + kSha));
  CHECK(!read_upload_answer(""));
}

TEST_CASE("a pod without dtrain gets a checked copy, the next connection uses it, and input sent early arrives") {
  FakeKubectl kubectl(run_after_dashes());
  ScopedVariable home("HOME", kubectl.dir.c_str());
  KubectlOptions options = options_for(kubectl);
  auto shared = std::make_shared<KubectlProvisioning>(options);

  std::unique_ptr<AgentConnection> first = connect(options, shared);
  first->send("early-bytes\n");  // before the agent runs: queued, then delivered
  std::string received = pump_for(*first, "early-bytes");
  INFO(first->close_reason());
  CHECK(received == "hello-from-agent\nearly-bytes\n");
  std::string copy = kubectl.dir + "/.cache/dtrain/9.9.9-test/dtrain";
  Result<std::string> copied = read_file(copy);
  REQUIRE(copied);
  CHECK(*copied == *read_file(options.local_binary));
  std::string diagnostics = first->take_diagnostics();
  CHECK(diagnostics.find("pod-0: provisioning: copied") != std::string::npos);
  CHECK(diagnostics.find("sha256 " + shared->binary.sha256() + " checked") != std::string::npos);
  CHECK(first->describe().find("kubectl exec pid") != std::string::npos);
  first->shutdown(1000);

  std::unique_ptr<AgentConnection> second = connect(options, shared);
  CHECK(pump_for(*second, "hello-from-agent") == "hello-from-agent\n");
  CHECK(second->take_diagnostics().find("pod-0: provisioning: cached copy " + copy) != std::string::npos);
  second->shutdown(1000);
  // Probe, copy, agent; then probe, agent: the copy was not made twice.
  std::string calls = kubectl.args();
  CHECK(calls.find("-n ml exec -i pod-0 -- /bin/sh -c") == 0);
  size_t copies = 0;
  for (size_t at = calls.find("head -c"); at != std::string::npos; at = calls.find("head -c", at + 1)) ++copies;
  CHECK(copies == 1);
}

TEST_CASE("bytes changed on the way are refused - the error names the pod, and the copy is not kept") {
  FakeKubectl kubectl(run_after_dashes(true));
  ScopedVariable home("HOME", kubectl.dir.c_str());
  KubectlOptions options = options_for(kubectl);
  auto shared = std::make_shared<KubectlProvisioning>(options);
  std::unique_ptr<AgentConnection> connection = connect(options, shared);
  CHECK(pump_for(*connection, "hello-from-agent").empty());
  REQUIRE(connection->closed());
  CHECK(connection->close_reason().find("pod-0: provisioning: the copy of dtrain at") == 0);
  CHECK(connection->close_reason().find("different sha256") != std::string::npos);
  CHECK(::access((kubectl.dir + "/.cache/dtrain/9.9.9-test/dtrain").c_str(), F_OK) != 0);
}

TEST_CASE("a probe that fails is explained - never a crash") {
  FakeKubectl kubectl("echo 'Error from server (NotFound): pods \"pod-0\" not found' >&2; exit 1\n");
  KubectlOptions options = options_for(kubectl);
  auto shared = std::make_shared<KubectlProvisioning>(options);
  std::unique_ptr<AgentConnection> connection = connect(options, shared);
  pump_for(*connection, "never");
  REQUIRE(connection->closed());
  CHECK(connection->close_reason().find("kubectl exec into pod pod-0 (provisioning probe) failed") == 0);
  CHECK(connection->close_reason().find("ssh.remote_dtrain") != std::string::npos);
}
