#pragma once
// The kubectl transport's provisioning: with ssh.remote_dtrain unset (as for SSH hosts,
// ssh_provision.cpp), the agent in a pod is a copy of this very binary, byte for byte.
//   1. A probe, `kubectl exec POD -- /bin/sh -c SCRIPT`, picks the pod's cache directory
//      ($HOME/.cache/dtrain/VERSION, else /tmp/dtrain-UID/VERSION: the first one it can create,
//      write and owns) and prints the sha256 of the copy there, if any.
//   2. A copy whose sha256 is this binary's runs as it is. Otherwise this binary is streamed in,
//      `kubectl exec -i POD -- /bin/sh -c 'head -c SIZE > TMP; sha256 check; mv TMP dtrain'`:
//      the pod checks the sha256 before the rename and prints it, dtrain checks it again, and
//      only then starts `kubectl exec -i POD -- PATH agent`. A mismatch is an error naming the pod.
// The copy reads exactly SIZE bytes, so it needs no stdin EOF (which older exec protocols lose).
// Everything the pod prints is untrusted and typed here (parse_pod_probe, read_upload_answer).

#include <memory>
#include <optional>
#include <string>

#include "launcher/base/child_process.h"
#include "launcher/base/result.h"
#include "launcher/transport/agent_binary.h"
#include "launcher/transport/kubectl_transport.h"

namespace dtrain::transport {

/// What the probe found in the pod.
struct PodProbe {
  std::string os;             ///< "Linux x86_64"
  std::string cache_dir;      ///< absolute; "" when no candidate could be made and written
  std::string cached_sha256;  ///< of cache_dir/dtrain when it is there and executable; else ""
  bool operator==(const PodProbe&) const = default;
};

/// The probe, run by /bin/sh in the pod; prints "os ...", "dir ..." and maybe "sha ...".
std::string pod_probe_script(const std::string& version);

/// Reads the probe's output. Malformed (no os line, a relative or non-printable directory, a
/// sha that is not 64 hex digits) is an Error saying what.
Result<PodProbe> parse_pod_probe(const std::string& output);

/// The copy, run by /bin/sh in the pod with the binary on stdin: reads `size` bytes into a
/// temporary file in `cache_dir`, checks their sha256, renames it to cache_dir/dtrain, prints
/// "ok SHA256". Exit 3: checksum mismatch; 4: no sha256sum in the pod.
std::string pod_upload_script(const std::string& cache_dir, size_t size, const std::string& sha256);

/// The copy's answer: the sha256 the pod computed, when it says "ok" with a 64-hex-digit sum.
std::optional<std::string> read_upload_answer(const std::string& output);

/// What to run in the pod, given the probe.
struct ProvisionDecision {
  bool copy = false;   ///< true: stream this binary to `path` first
  std::string path;    ///< cache_dir/dtrain
};

/// The cached copy when its sha256 is `sha256`; else a copy, when the pod runs `local_os`; else
/// an Error naming `pod` and the fix (ssh.remote_dtrain).
Result<ProvisionDecision> decide_provisioning(const PodProbe& probe, const std::string& local_os,
                                              const std::string& sha256, const std::string& pod);

/// This binary and what provisioning compares with, shared by every pod of a transport (read
/// and hashed once).
struct KubectlProvisioning {
  explicit KubectlProvisioning(const KubectlOptions& options)
      : binary(options.local_binary), version(options.dtrain_version) {}
  AgentBinary binary;
  std::string version;
  std::string os = local_os();
};

/// An agent connection that provisions dtrain in the pod first (probe, maybe copy), then runs
/// the agent through a KubectlConnection and forwards to it. Until then, bytes sent are queued
/// and a closed input is remembered.
class KubectlProvisioningConnection final : public AgentConnection {
 public:
  /// Starts the probe.
  static Result<std::unique_ptr<AgentConnection>> start(std::string pod, KubectlOptions options,
                                                        std::shared_ptr<KubectlProvisioning> shared);
  ~KubectlProvisioningConnection() override;

  std::vector<pollfd> poll_fds() const override;
  void pump() override;
  void send(std::string bytes) override;
  std::string take_received() override { return agent_ ? agent_->take_received() : std::string(); }
  std::string take_diagnostics() override;
  bool closed() const override { return agent_ ? agent_->closed() : failed_; }
  std::string close_reason() const override { return agent_ ? agent_->close_reason() : close_reason_; }
  void close_input() override;
  void shutdown(int grace_ms) override;
  std::optional<pid_t> local_pid() const override { return std::nullopt; }
  bool needs_periodic_pump() const override { return agent_ ? agent_->needs_periodic_pump() : !failed_; }
  std::string describe() const override;

 private:
  enum class Step { probe, upload };
  KubectlProvisioningConnection(std::string pod, KubectlOptions options, std::shared_ptr<KubectlProvisioning> shared)
      : pod_(std::move(pod)), options_(std::move(options)), shared_(std::move(shared)) {}
  Status start_step(Step step, const std::string& script, int timeout_ms);
  void finish_probe(int exit_code);
  void finish_upload(int exit_code);
  void start_agent(const std::string& path);
  void fail(const std::string& reason);

  std::string pod_;
  KubectlOptions options_;
  std::shared_ptr<KubectlProvisioning> shared_;
  Step step_ = Step::probe;
  std::optional<PipedChild> child_;  // the probe or the copy
  std::string out_;
  std::string err_;
  int64_t deadline_ms_ = 0;
  int64_t upload_started_ms_ = 0;
  std::string upload_path_;
  std::unique_ptr<AgentConnection> agent_;
  std::string pending_input_;
  bool input_closed_ = false;
  bool failed_ = false;
  std::string close_reason_;
  std::string diagnostics_;
};

}  // namespace dtrain::transport
