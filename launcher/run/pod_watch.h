#pragma once
// hosts: kubernetes: the pods of a run watched for loss (`kubectl get pods -w -o json
// --output-watch-events`), so that a pod deleted, evicted, ended or on a NotReady node is a lost
// host at once, through the same path as an SSH host whose channel fails (RunDriver::host_lost),
// instead of after heartbeat.timeout of silence. The driver pumps it at each tick; kubectl's
// output is typed by launcher/spec/kubernetes_pods.h. The watch ends with the run: its kubectl
// is killed and reaped when the PodWatch goes.

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "launcher/base/child_process.h"
#include "launcher/spec/kubernetes_pods.h"
#include "launcher/transport/kubectl_transport.h"

namespace dtrain::run {

/// A pod of the run that is no longer a host, and why ("pod x was deleted").
struct LostPod {
  std::string pod;
  std::string reason;
};

class PodWatch {
 public:
  /// Watches `pods` (the run's hosts and spares) among those of `selector` (empty: every pod of
  /// the namespace). Starts kubectl at the first poll().
  PodWatch(transport::KubectlOptions options, std::string selector, std::set<std::string> pods);

  /// Reads what kubectl wrote so far, never blocking; the pods lost since the last call, each
  /// once. A watch that ended or broke is started again (at most every kRestartSpacingMs); what
  /// went wrong goes to `warnings`. `now_ms`: monotonic.
  std::vector<LostPod> poll(int64_t now_ms, std::vector<std::string>& warnings);

  /// kubectl's pid while it runs (tests prove it gone after the run).
  std::optional<pid_t> pid() const;

  static constexpr int64_t kRestartSpacingMs = 5000;

 private:
  void start(int64_t now_ms, std::vector<std::string>& warnings);
  void handle_object(const std::string& text, std::vector<LostPod>& lost, std::vector<std::string>& warnings);

  transport::KubectlOptions options_;
  std::string selector_;
  std::set<std::string> pods_;
  std::set<std::string> reported_;  ///< lost pods already returned
  std::optional<PipedChild> child_;
  spec::JsonObjectStream stream_;
  std::string stderr_tail_;
  int64_t next_start_ms_ = 0;
};

}  // namespace dtrain::run
