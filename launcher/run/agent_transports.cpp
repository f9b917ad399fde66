#include "launcher/run/agent_transports.h"

#include "launcher/hosts/kubernetes_hosts.h"
#include "launcher/hosts/run_hosts.h"

namespace dtrain::run {

AgentTransports::AgentTransports(const spec::JobSpec& spec, std::string dtrain_exe, transport::Transport* injected,
                                 std::function<void(const std::string&)> warn)
    : spec_(spec), dtrain_exe_(std::move(dtrain_exe)), injected_(injected), warn_(std::move(warn)) {}

transport::AgentTarget AgentTransports::target_for(const spec::HostEntry& host) const {
  transport::AgentTarget target;
  target.host = host.name;
  target.user = host.user.empty() ? spec_.ssh.user : host.user;
  target.port = host.port ? host.port : spec_.ssh.port;
  target.dtrain_path = dtrain_exe_;
  if (spec_.transport == spec::TransportKind::kubectl) {
    target.dtrain_path = hosts::dtrain_path_in_pods(spec_);  // a pod is never this machine; empty: provision
  } else if (!host.is_local()) {
    target.dtrain_path = spec_.ssh.remote_dtrain;  // empty: provision this binary there
    target.port = host.port;
  }
  return target;
}

bool AgentTransports::reached_over_ssh(const spec::HostEntry& host) const {
  return !injected_ && spec_.transport != spec::TransportKind::srun && spec_.transport != spec::TransportKind::kubectl &&
         !host.is_local();
}

Result<std::unique_ptr<transport::AgentConnection>> AgentTransports::start_agent(const spec::HostEntry& host) {
  transport::AgentTarget target = target_for(host);
  if (injected_) return injected_->start_agent(target);
  if (spec_.transport == spec::TransportKind::srun) return srun().start_agent(target);
  if (spec_.transport == spec::TransportKind::kubectl) return kubectl().start_agent(target);
  if (host.is_local()) return local_.start_agent(target);
  return ssh().start_agent(target);
}

transport::Transport& AgentTransports::ssh() {
  if (!ssh_) {
    transport::SshOptions options = hosts::ssh_options_for(spec_);
    if (options.client == transport::SshClient::openssh) {
      ssh_ = std::make_unique<transport::OpensshTransport>(std::move(options));
    } else {
      ssh_ = std::make_unique<transport::SshTransport>(std::move(options));
    }
    if (spec_.ssh.host_key_policy == spec::HostKeyPolicy::insecure) {
      warn_("ssh.host_key_policy is insecure: host keys are not checked");
    }
  }
  return *ssh_;
}

transport::KubectlTransport& AgentTransports::kubectl() {
  if (!kubectl_) kubectl_ = std::make_unique<transport::KubectlTransport>(hosts::kubectl_options_for(spec_));
  return *kubectl_;
}

// One srun step for every host and spare: agents start as its tasks, this machine's included (so
// that Slurm's cgroups and accounting cover every worker). The nodes run this very binary: on a
// Slurm cluster it sits on a shared file system (or ssh.remote_dtrain says where it is).
transport::SrunTransport& AgentTransports::srun() {
  if (!srun_) {
    transport::SrunOptions options;
    for (const spec::HostEntry& host : spec_.hosts) options.hosts.push_back(host.name);
    for (const spec::HostEntry& host : spec_.spares) options.hosts.push_back(host.name);
    options.dtrain_path = spec_.ssh.remote_dtrain.empty() ? dtrain_exe_ : spec_.ssh.remote_dtrain;
    srun_ = std::make_unique<transport::SrunTransport>(std::move(options));
  }
  return *srun_;
}

}  // namespace dtrain::run
