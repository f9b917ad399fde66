#include "launcher/transport/kubectl_transport.h"

#include <chrono>

#include "launcher/base/strings.h"
#include "launcher/transport/kubectl_provision.h"

namespace dtrain::transport {
namespace {

int64_t monotonic_ms() {
  using namespace std::chrono;
  return duration_cast<milliseconds>(steady_clock::now().time_since_epoch()).count();
}

// After the agent's output ended, how long kubectl may take to exit before the link is closed
// without its status (as the local transport does).
constexpr int64_t kExitAfterEofMs = 1000;
constexpr size_t kStderrTailBytes = 2048;

bool contains(const std::string& text, const char* word) { return text.find(word) != std::string::npos; }

std::string where(const KubectlOptions& options) {
  std::string text = options.namespace_name.empty() ? "the context's namespace" : "namespace '" + options.namespace_name + "'";
  if (!options.context.empty()) text += " of context '" + options.context + "'";
  return text;
}

}  // namespace

std::vector<std::string> kubectl_argv(const KubectlOptions& options, const std::vector<std::string>& rest) {
  std::vector<std::string> argv{options.kubectl};
  if (!options.kubeconfig.empty()) argv.insert(argv.end(), {"--kubeconfig", options.kubeconfig});
  if (!options.context.empty()) argv.insert(argv.end(), {"--context", options.context});
  if (!options.namespace_name.empty()) argv.insert(argv.end(), {"-n", options.namespace_name});
  argv.insert(argv.end(), rest.begin(), rest.end());
  return argv;
}

std::vector<std::string> kubectl_exec_argv(const KubectlOptions& options, const std::string& pod,
                                           const std::vector<std::string>& command) {
  std::vector<std::string> rest{"exec", "-i", pod};
  if (!options.container.empty()) rest.insert(rest.end(), {"-c", options.container});
  rest.push_back("--");
  rest.insert(rest.end(), command.begin(), command.end());
  return kubectl_argv(options, rest);
}

std::vector<std::string> kubectl_watch_argv(const KubectlOptions& options, const std::string& selector) {
  std::vector<std::string> rest{"get", "pods"};
  if (!selector.empty()) rest.insert(rest.end(), {"-l", selector});
  rest.insert(rest.end(), {"-w", "-o", "json", "--output-watch-events"});
  return kubectl_argv(options, rest);
}

std::string explain_kubectl_failure(const std::string& what, const std::string& kubectl_stderr,
                                    const KubectlOptions& options) {
  std::string said = printable(std::string(trim(kubectl_stderr)), 600);
  std::string fix;
  if (contains(said, "forbidden") || contains(said, "Forbidden")) {
    fix = "the kubeconfig's user lacks a permission in " + where(options) +
          " (dtrain needs get, list and watch on pods and create on pods/exec; `dtrain hosts` checks each); ask the "
          "cluster's administrators for a Role that grants it";
  } else if (contains(said, "context was not found") || (contains(said, "does not exist") && contains(said, "context"))) {
    fix = "kubernetes.context names no context of the kubeconfig; `kubectl config get-contexts` lists them";
  } else if (!options.kubeconfig.empty() && contains(said, options.kubeconfig.c_str()) &&
             (contains(said, "no such file") || contains(said, "permission denied"))) {
    fix = "kubectl cannot read the kubeconfig " + options.kubeconfig + "; fix kubernetes.kubeconfig";
  } else if (contains(said, "Unauthorized") || contains(said, "must be logged in")) {
    fix = "the cluster refused the kubeconfig's credentials; log in again the way your cluster wants (kubectl reads "
          "them itself)";
  } else if (contains(said, "NotFound") || contains(said, "not found")) {
    fix = "it is gone, or lives in another namespace than " + where(options) + " (kubernetes.namespace)";
  } else if (contains(said, "connection refused") || contains(said, "no such host") || contains(said, "i/o timeout")) {
    fix = "the API server cannot be reached from here; check the kubeconfig's server and the network";
  }
  std::string message = what + " failed" + (said.empty() ? "" : ": " + said);
  return fix.empty() ? message : message + "; " + fix;
}

KubectlConnection::KubectlConnection(std::string pod, KubectlOptions options, PipedChild child)
    : pod_(std::move(pod)), options_(std::move(options)), child_(std::move(child)) {
  deadline_ms_ = monotonic_ms() + options_.start_timeout_ms;
}

KubectlConnection::~KubectlConnection() { shutdown(kDestructorGraceMs); }

void KubectlConnection::pump() {
  if (closed()) return;
  child_.pump();
  std::string out = child_.take_stdout();
  if (!out.empty()) started_ = true;
  received_ += out;
  std::string err = child_.take_stderr();
  if (!err.empty()) {
    diagnostics_ += err;
    stderr_tail_ += err;
    if (stderr_tail_.size() > kStderrTailBytes) stderr_tail_.erase(0, stderr_tail_.size() - kStderrTailBytes);
  }
  check_end();
}

void KubectlConnection::check_end() {
  if (!started_ && monotonic_ms() >= deadline_ms_) {
    close_reason_ = "kubectl exec into pod " + pod_ + " gave no answer within " +
                    std::to_string(options_.start_timeout_ms / 1000) + " s" +
                    (stderr_tail_.empty() ? "" : " (" + printable(std::string(trim(stderr_tail_)), 300) + ")");
    child_.terminate(0);
    return;
  }
  if (!child_.stdout_closed()) return;
  if (!child_.reaped() && monotonic_ms() - child_.stdout_closed_ms() < kExitAfterEofMs) return;
  std::optional<int> status = child_.wait_status();
  std::string how = status ? "kubectl exec " + PipedChild::describe_status(*status) : "kubectl exec closed its output";
  if (!started_) {
    close_reason_ = explain_kubectl_failure("kubectl exec into pod " + pod_, stderr_tail_, options_) + " (" + how + ")";
  } else {
    close_reason_ = "agent connection through " + how +
                    (stderr_tail_.empty() ? "" : ": " + printable(std::string(trim(stderr_tail_)), 300));
  }
}

void KubectlConnection::shutdown(int grace_ms) {
  if (shut_down_) return;
  shut_down_ = true;
  // Reads while waiting: an agent blocked on a full pipe could not finish fencing.
  child_.terminate(std::max(grace_ms, 0));
  received_ += child_.take_stdout();
  diagnostics_ += child_.take_stderr();
  if (close_reason_.empty()) close_reason_ = "agent connection shut down";
}

std::string KubectlConnection::describe() const {
  return pod_ + " (kubectl exec pid " + std::to_string(child_.pid()) + (options_.container.empty() ? "" : ", container " + options_.container) + ")";
}

Result<std::unique_ptr<AgentConnection>> start_kubectl_agent(const KubectlOptions& options, const std::string& pod,
                                                             const std::string& dtrain_path) {
  std::vector<std::string> argv = kubectl_exec_argv(options, pod, {dtrain_path, "agent"});
  // Its own process group: a terminal's Ctrl-C goes to the supervisor, which stops the run in
  // order (the agents fence when their input ends) instead of every kubectl dying at once.
  Result<PipedChild> child = PipedChild::spawn(argv, {.own_process_group = true, .kill_with_parent = true});
  if (!child) {
    return Error::user(pod + ": " + child.error().message + "; install kubectl or set kubernetes.kubectl to its path");
  }
  return std::unique_ptr<AgentConnection>(new KubectlConnection(pod, options, std::move(child).value()));
}

KubectlTransport::KubectlTransport(KubectlOptions options) : options_(std::move(options)) {}

KubectlTransport::~KubectlTransport() = default;

Result<std::unique_ptr<AgentConnection>> KubectlTransport::start_agent(const AgentTarget& target) {
  if (!target.dtrain_path.empty()) return start_kubectl_agent(options_, target.host, target.dtrain_path);
  if (!provisioning_) provisioning_ = std::make_shared<KubectlProvisioning>(options_);
  return KubectlProvisioningConnection::start(target.host, options_, provisioning_);
}

}  // namespace dtrain::transport
