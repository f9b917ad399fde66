#pragma once
// The SSH transport: one libssh2 session per host, driven without blocking by the caller's poll
// loop (no thread per host). Each connection walks
//   queued → connecting → handshake (+ host key check) → authenticating
//          → [probing → uploading: binary provisioning] → starting → running → closed
// and every failure closes it with a reason that names the host, the phase and the fix:
//   "gpu01: connect to 10.77.0.3:22 timed out after 5s; fix: is the host up and reachable ..."
// This is the only libssh2 user in dtrain. SshConnection's parts: ssh_transport.cpp (resolve,
// connect, run, deadlines, teardown), ssh_login.cpp (handshake, host key, authentication),
// ssh_provision.cpp (probe, copy, start the agent); ssh_shared.h holds what they share.

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "launcher/base/clock.h"
#include "launcher/base/duration.h"
#include "launcher/base/host_key_policy.h"
#include "launcher/base/ssh_client.h"
#include "launcher/transport/ssh_channel.h"
#include "launcher/transport/transport.h"

struct _LIBSSH2_AGENT;
struct libssh2_agent_publickey;

namespace dtrain::transport {

/// What to do with a host key (spec: ssh.host_key_policy): launcher/base/host_key_policy.h.
using dtrain::HostKeyPolicy;
using dtrain::SshClient;
using dtrain::to_string;

struct SshOptions {
  std::string user;                         ///< targets without a user; empty: the current user
  int port = 22;                            ///< targets with port 0
  std::vector<std::string> identity_files;  ///< tried after ssh-agent; empty: ~/.ssh/id_ed25519, id_ecdsa
  bool use_agent = true;                    ///< try $SSH_AUTH_SOCK first
  std::string known_hosts;                  ///< empty: ~/.ssh/known_hosts
  /// Read after known_hosts, as OpenSSH's GlobalKnownHostsFile (libssh2 client; the openssh
  /// client reads its own). A missing file counts as empty.
  std::vector<std::string> global_known_hosts{"/etc/ssh/ssh_known_hosts", "/etc/ssh/ssh_known_hosts2"};
  HostKeyPolicy host_key_policy = HostKeyPolicy::strict;
  Millis connect_timeout{10'000};           ///< from the first pump to "agent started"
  Millis provision_timeout{120'000};        ///< extra time for copying the binary
  /// Running: close the connection when nothing has arrived for this long (keepalives alone
  /// never notice a partition). 0: off (the supervisor watches heartbeats itself).
  Millis liveness_timeout{0};
  int max_parallel = 64;                    ///< connections in setup at once (ssh.max_parallel)
  /// dtrain on the hosts (ssh.remote_dtrain); empty: provision. AgentTarget::dtrain_path, when
  /// set, wins over this.
  std::string remote_dtrain;
  std::string local_binary;                 ///< what provisioning copies; empty: /proc/self/exe
  std::string version;                      ///< agent version to find or copy; empty: kVersion
  std::vector<std::string> agent_args{"agent"};  ///< after the remote path, each quoted
  /// Replaces `exec <dtrain> agent` (and provisioning) by this shell command: for `dtrain hosts`
  /// and tests.
  std::string remote_command;
  const Clock* clock = nullptr;             ///< nullptr: a SystemClock
  SshClient client = SshClient::libssh2;    ///< ssh.client: which transport reaches the hosts
  std::string openssh_config;               ///< openssh: `ssh -F` (ssh.config); empty: ssh's own
  std::string openssh_program = "ssh";      ///< openssh: the client to run (PATH lookup)
};


enum class SshPhase { queued, connecting, handshake, authenticating, probing, uploading, starting, running, closed };
const char* to_string(SshPhase phase);

/// What a connection learned on the way (for `dtrain hosts`, logs and tests).
struct SshConnectInfo {
  std::string address;          ///< "10.77.0.3:22"
  std::string user;
  std::string host_key_type;    ///< "ssh-ed25519"
  std::string host_key_fingerprint;  ///< "SHA256:..."
  std::string host_key_status;  ///< "known (line 3)", "recorded (accept-new)", "NOT CHECKED (insecure)"
  std::string auth_method;      ///< "ssh-agent" or the identity file that worked
  std::string remote_dtrain;    ///< the path run on the host
  std::string provisioning;     ///< "" (not needed), "cached", "copied 12.3 MB in 0.4s", "in PATH"
  std::string remote_os;        ///< "Linux x86_64" (provisioning probe)
  int64_t connect_ms = -1;      ///< TCP connect done, from start
  int64_t ready_ms = -1;        ///< authenticated, from start
  int64_t started_ms = -1;      ///< remote command started, from start
};

class SshShared;

/// One SSH session + the channel that runs the agent (or options.remote_command).
class SshConnection final : public AgentConnection {
 public:
  SshConnection(std::shared_ptr<SshShared> shared, AgentTarget target);
  ~SshConnection() override;

  std::vector<pollfd> poll_fds() const override;
  void pump() override;
  void send(std::string bytes) override;
  std::string take_received() override;
  std::string take_diagnostics() override;
  bool closed() const override { return phase_ == SshPhase::closed; }
  std::string close_reason() const override { return close_reason_; }
  void close_input() override;
  void shutdown(int grace_ms) override;
  std::optional<pid_t> local_pid() const override { return std::nullopt; }
  std::string describe() const override;
  std::string local_address() const override;

  SshPhase phase() const { return phase_; }
  const SshConnectInfo& info() const { return info_; }
  /// True when the connection failed before the remote command ran (an error, not an exit).
  bool failed() const { return failed_; }
  /// After the remote command ended: its exit code, or its signal ("KILL").
  std::optional<int> exit_code() const;
  std::string exit_signal() const;
  /// Monotonic ms at which pump() must run even without fd activity (a deadline), or -1.
  int64_t next_deadline_ms() const;

 private:
  enum class ChannelRole { none, probe, upload, agent };
  bool step();
  bool step_connect();
  bool step_handshake();
  bool step_authenticate();
  bool step_running();
  /// After authentication: the configured command, the configured dtrain, or the probe.
  void start_remote();
  void start_channel(ChannelRole role, std::string command);
  void start_agent_command(const std::string& remote_path);
  void finish_probe();
  void finish_upload();
  void check_deadlines();
  bool verify_host_key();
  void close_with(std::string reason, bool failure);
  void teardown();
  int64_t now() const;
  int64_t since_start() const { return now() - started_at_; }
  std::string libssh2_error() const;

  std::shared_ptr<SshShared> shared_;
  AgentTarget target_;
  SshPhase phase_ = SshPhase::queued;
  bool counted_in_setup_ = false;
  bool failed_ = false;
  std::string close_reason_;
  SshConnectInfo info_;

  std::vector<std::string> addresses_;  // resolved, "ip" strings
  std::vector<std::pair<int, std::vector<unsigned char>>> sockaddrs_;  // family, raw sockaddr
  size_t address_index_ = 0;
  int socket_fd_ = -1;
  ::_LIBSSH2_SESSION* session_ = nullptr;
  ::_LIBSSH2_AGENT* agent_ = nullptr;
  std::unique_ptr<ExecChannel> channel_;  // probe, upload, then the agent
  ChannelRole channel_role_ = ChannelRole::none;

  // authentication progress
  bool auth_listed_ = false;
  bool agent_done_ = false;
  ::libssh2_agent_publickey* agent_identity_ = nullptr;   // being tried
  ::libssh2_agent_publickey* agent_previous_ = nullptr;   // last refused
  int agent_keys_tried_ = 0;
  size_t identity_index_ = 0;
  bool identity_checked_ = false;  // identity_index_ inspected and found usable
  std::vector<std::string> auth_tried_;
  std::vector<std::string> auth_skipped_;

  // provisioning
  std::string remote_home_;
  std::string upload_path_;
  int64_t upload_started_ms_ = 0;

  int64_t started_at_ = 0;
  int64_t deadline_ = -1;
  int64_t last_received_ms_ = 0;
  bool input_closed_ = false;
  std::string pending_input_;
  std::string received_;
  std::string diagnostics_;
};

/// Starts agents over SSH. One object per run; connections share its options, its bound on
/// parallel setups and the (lazily read) local binary for provisioning.
class SshTransport final : public Transport {
 public:
  explicit SshTransport(SshOptions options);
  ~SshTransport() override;

  Result<std::unique_ptr<AgentConnection>> start_agent(const AgentTarget& target) override;
  /// Same, with the concrete type (phase, info, exit status).
  Result<std::unique_ptr<SshConnection>> connect(const AgentTarget& target);

  const SshOptions& options() const;

 private:
  std::shared_ptr<SshShared> shared_;
};

}  // namespace dtrain::transport
