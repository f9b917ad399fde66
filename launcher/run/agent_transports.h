#pragma once
// Which transport reaches which host, and the AgentTarget each host gets: the one place that
// maps the spec (host entries, ssh section) to transports. The driver asks it for a connection
// per host and never names a transport type.

#include <functional>
#include <memory>
#include <string>

#include "launcher/base/result.h"
#include "launcher/spec/job_spec.h"
#include "launcher/transport/kubectl_transport.h"
#include "launcher/transport/local_transport.h"
#include "launcher/transport/openssh_transport.h"
#include "launcher/transport/ssh_transport.h"
#include "launcher/transport/srun_transport.h"
#include "launcher/transport/transport.h"

namespace dtrain::run {

class AgentTransports {
 public:
  /// `warn` hears once about settings the user should know about (insecure host keys).
  /// `injected` (not owned; may be null) replaces every transport: driver tests and dtrain-sim.
  AgentTransports(const spec::JobSpec& spec, std::string dtrain_exe, transport::Transport* injected,
                  std::function<void(const std::string&)> warn);

  /// Starts `dtrain agent` for `host`; returns at once (see transport::Transport::start_agent).
  Result<std::unique_ptr<transport::AgentConnection>> start_agent(const spec::HostEntry& host);

  /// Where and as whom `host`'s agent starts (also what a relay is told for the hosts it reaches).
  transport::AgentTarget target_for(const spec::HostEntry& host) const;
  /// True when `host` is reached over SSH (libssh2 or openssh): what a relay tree may carry.
  bool reached_over_ssh(const spec::HostEntry& host) const;

 private:
  transport::SrunTransport& srun();
  transport::KubectlTransport& kubectl();
  /// The remote hosts' transport, as ssh.client says: libssh2 (SshTransport) or openssh.
  transport::Transport& ssh();

  const spec::JobSpec& spec_;
  std::string dtrain_exe_;
  transport::Transport* injected_;
  std::function<void(const std::string&)> warn_;
  std::unique_ptr<transport::SrunTransport> srun_;  ///< transport: srun (one step for every host)
  std::unique_ptr<transport::KubectlTransport> kubectl_;  ///< transport: kubectl (every host a pod)
  transport::LocalTransport local_;
  std::unique_ptr<transport::Transport> ssh_;  ///< made when the first remote host needs it
};

}  // namespace dtrain::run
