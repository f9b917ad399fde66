#pragma once
// The `openssh` transport (ssh.client: openssh): the system's `ssh -T host <command>` as a child
// process whose stdin/stdout carry the agent protocol, as the local transport's pipes do. So the
// user's ssh_config, ProxyJump, host certificates, ControlMaster and Kerberos all apply, as they
// do for pdsh and mpirun. BatchMode=yes (never a prompt); StrictHostKeyChecking follows
// ssh.host_key_policy.
//
// One ssh process per host does everything, provisioning included: the remote command is a
// small /bin/sh script that announces itself on stdout with "dtrain.openssh <key> <value>" lines
// before it execs the agent:
//   dtrain.openssh from <$SSH_CONNECTION>   where the connection came from (MASTER_ADDR)
//   dtrain.openssh need <$HOME>             no copy of this binary there: send it (N bytes)
//   dtrain.openssh start <how> <path>       the agent starts now; protocol bytes follow
//   dtrain.openssh os|home|checksum <text>  provisioning cannot proceed (the script exits 3)
// Protocol bytes from the supervisor are held back until "start", so nothing the agent should
// read can be consumed by the copy (`head -c N` reads exactly the binary).

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "launcher/base/child_process.h"
#include "launcher/transport/agent_binary.h"
#include "launcher/transport/ssh_transport.h"
#include "launcher/transport/transport.h"

namespace dtrain::transport {

/// What an openssh connection learned on the way (for `dtrain hosts`, logs and tests).
struct OpensshInfo {
  std::string command_line;   ///< "ssh -T -o BatchMode=yes ... gpu01 '...'" (for messages)
  std::string remote_dtrain;  ///< the path run on the host
  std::string provisioning;   ///< "given", "cached", "in PATH", "copied 12.3 MB in 0.4s"
  std::string ssh_connection; ///< the host's $SSH_CONNECTION: "client_ip port server_ip port"
  int64_t started_ms = -1;    ///< remote command started, from spawn
};

/// `ssh`'s argv for `target` running `remote_command` (exposed for unit tests).
std::vector<std::string> openssh_arguments(const SshOptions& options, const AgentTarget& target,
                                           const std::string& remote_command);

/// Turns what `ssh` wrote to stderr before the agent started into "what went wrong; fix: ...",
/// for the failures users meet (changed or unknown host key, keys refused, name, connect).
std::string explain_openssh_failure(const std::string& host, const std::string& ssh_stderr,
                                    const SshOptions& options);

class OpensshShared;

/// One `ssh` child running the agent (or options.remote_command) on one host.
class OpensshConnection final : public AgentConnection {
 public:
  OpensshConnection(std::shared_ptr<OpensshShared> shared, AgentTarget target);
  ~OpensshConnection() override;

  std::vector<pollfd> poll_fds() const override;
  void pump() override;
  void send(std::string bytes) override;
  std::string take_received() override { return std::exchange(received_, {}); }
  std::string take_diagnostics() override { return std::exchange(diagnostics_, {}); }
  bool closed() const override { return closed_; }
  std::string close_reason() const override { return close_reason_; }
  void close_input() override;
  void shutdown(int grace_ms) override;
  std::optional<pid_t> local_pid() const override { return std::nullopt; }
  std::optional<pid_t> child_pid() const override;
  /// Until the agent started (queued behind ssh.max_parallel, a start deadline) or while its
  /// ssh lingers after the output ended; otherwise the child's pipes and pidfd wake the caller.
  bool needs_periodic_pump() const override { return !started_ || !child_ || child_->stdout_closed(); }
  /// Our address as the host saw it ($SSH_CONNECTION), when it is an address of this machine
  /// (through ProxyJump it is the jump host's, which is not ours: then "").
  std::string local_address() const override { return local_address_; }
  std::string describe() const override;

  const OpensshInfo& info() const { return info_; }
  bool started() const { return started_; }
  /// True when it ended before the remote command ran (an error, not an exit); for a bare
  /// options.remote_command also when ssh exited with 255 (its own failure).
  bool failed() const { return failed_; }
  /// After the end: ssh's exit code (the remote command's, or 255 for ssh's own errors).
  std::optional<int> exit_code() const;
  /// Monotonic ms by which the agent must have started, or -1 once it has.
  int64_t next_deadline_ms() const { return started_ ? -1 : deadline_; }

 private:
  bool spawn();
  void read_preamble();
  void handle_line(const std::string& key, const std::string& value);
  void mark_started(const std::string& how, const std::string& path);
  void check_end();
  void close_with(std::string reason, bool failure);
  void keep_stderr(const std::string& bytes);
  int64_t now() const;

  std::shared_ptr<OpensshShared> shared_;
  AgentTarget target_;
  std::optional<PipedChild> child_;  // empty while queued behind ssh.max_parallel
  bool counted_in_setup_ = false;
  OpensshInfo info_;
  int64_t spawned_ms_ = 0;
  int64_t deadline_ = -1;
  int64_t upload_started_ms_ = -1;
  bool started_ = false;
  bool closed_ = false;
  bool failed_ = false;
  bool input_closed_ = false;
  std::string close_reason_;
  std::string preamble_;        // stdout before "start"
  std::string pending_input_;   // protocol bytes held back until "start"
  std::string received_;
  std::string diagnostics_;
  std::string stderr_tail_;     // ssh's last words, for the close reason
  std::string local_address_;
};

/// Starts agents through the system's `ssh`. One object per run; connections share its options,
/// its bound on ssh processes in setup at once (ssh.max_parallel) and the (lazily read) binary
/// for provisioning.
class OpensshTransport final : public Transport {
 public:
  explicit OpensshTransport(SshOptions options);
  ~OpensshTransport() override;

  Result<std::unique_ptr<AgentConnection>> start_agent(const AgentTarget& target) override;
  /// Same, with the concrete type. `ssh` starts at the connection's first pump().
  Result<std::unique_ptr<OpensshConnection>> connect(const AgentTarget& target);

 private:
  std::shared_ptr<OpensshShared> shared_;
};

}  // namespace dtrain::transport
