#pragma once
// The `kubectl` transport (hosts: kubernetes): `kubectl exec -i POD -c CONTAINER -- <dtrain> agent`
// as a child process whose stdin/stdout carry the agent protocol, as the local transport's pipes
// and the openssh transport's ssh do. kubectl reads the user's kubeconfig (and its context,
// credentials, exec plugins and proxies) itself: dtrain passes only the file's path and the
// context's name, never a token, so no credential is ever on a command line or in a run log.
//
// Every kubectl call dtrain makes starts with kubectl_argv(); the calls are listed in
// docs/kubernetes.md (and agreed with the test cluster's emulated API server).

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "launcher/base/child_process.h"
#include "launcher/base/version.h"
#include "launcher/transport/transport.h"

namespace dtrain::transport {

/// Which cluster and namespace, as kubectl is told them.
struct KubectlOptions {
  std::string kubectl = "kubectl";  ///< the client (PATH lookup)
  std::string kubeconfig;           ///< --kubeconfig; empty: kubectl's own ($KUBECONFIG, ~/.kube/config)
  std::string context;              ///< --context; empty: the kubeconfig's current context
  std::string namespace_name;       ///< -n; empty: the context's namespace
  std::string container;            ///< exec -c; empty: kubectl's default (the pod's first)
  /// How long `kubectl exec` may take before the agent's first byte arrives (API server, kubelet,
  /// the agent's start); past it the connection closes with the reason.
  int start_timeout_ms = 60'000;
  /// Provisioning (kubectl_provision.h), when a target has no dtrain path: how long the copy of
  /// this binary into one pod may take, the cache directory's version, and what is copied
  /// (empty: this executable).
  int provision_timeout_ms = 300'000;
  std::string dtrain_version = kVersion;
  std::string local_binary;
};

/// `kubectl [--kubeconfig F] [--context C] [-n NS] <rest...>`.
std::vector<std::string> kubectl_argv(const KubectlOptions& options, const std::vector<std::string>& rest);

/// `kubectl ... exec -i POD [-c CONTAINER] -- <command...>`.
std::vector<std::string> kubectl_exec_argv(const KubectlOptions& options, const std::string& pod,
                                           const std::vector<std::string>& command);

/// `kubectl ... get pods [-l SELECTOR] -w -o json --output-watch-events`.
std::vector<std::string> kubectl_watch_argv(const KubectlOptions& options, const std::string& selector);

/// What kubectl said when it failed, made actionable: the missing permission, the unknown
/// context or namespace, the pod that is gone. `what` names the call ("kubectl exec into pod x").
std::string explain_kubectl_failure(const std::string& what, const std::string& kubectl_stderr,
                                    const KubectlOptions& options);

/// One `kubectl exec` running the agent in one pod.
class KubectlConnection final : public AgentConnection {
 public:
  KubectlConnection(std::string pod, KubectlOptions options, PipedChild child);
  /// shutdown(kDestructorGraceMs): the agent gets time to fence.
  ~KubectlConnection() override;

  std::vector<pollfd> poll_fds() const override { return child_.poll_fds(); }
  void pump() override;
  void send(std::string bytes) override { child_.write(std::move(bytes)); }
  std::string take_received() override { return std::exchange(received_, {}); }
  std::string take_diagnostics() override { return std::exchange(diagnostics_, {}); }
  bool closed() const override { return !close_reason_.empty(); }
  std::string close_reason() const override { return close_reason_; }
  void close_input() override { child_.close_input(); }
  void shutdown(int grace_ms) override;
  std::optional<pid_t> local_pid() const override { return std::nullopt; }
  /// Until the first byte (the start deadline), and while kubectl lingers after its output ended.
  bool needs_periodic_pump() const override { return !started_ || child_.stdout_closed(); }
  std::string describe() const override;

 private:
  void check_end();

  std::string pod_;
  KubectlOptions options_;
  PipedChild child_;
  int64_t deadline_ms_ = 0;
  bool started_ = false;
  bool shut_down_ = false;
  std::string received_;
  std::string diagnostics_;
  std::string stderr_tail_;  // kubectl's last words, for the close reason
  std::string close_reason_;

  static constexpr int kDestructorGraceMs = 5000;
};

/// `kubectl exec -i POD [-c C] -- DTRAIN_PATH agent` as a connection.
Result<std::unique_ptr<AgentConnection>> start_kubectl_agent(const KubectlOptions& options, const std::string& pod,
                                                             const std::string& dtrain_path);

struct KubectlProvisioning;

/// Starts agents with `kubectl exec`: target.host is the pod, target.dtrain_path the dtrain
/// binary inside it (the image holds it, or a volume); empty: this binary, provisioned into the
/// pod first (kubectl_provision.h).
class KubectlTransport final : public Transport {
 public:
  explicit KubectlTransport(KubectlOptions options);
  ~KubectlTransport() override;
  Result<std::unique_ptr<AgentConnection>> start_agent(const AgentTarget& target) override;

 private:
  KubectlOptions options_;
  std::shared_ptr<KubectlProvisioning> provisioning_;  // made on the first pod that needs it
};

}  // namespace dtrain::transport
