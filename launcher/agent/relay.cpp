#include "launcher/agent/relay.h"

#include <algorithm>

#include "launcher/transport/openssh_transport.h"
#include "launcher/transport/ssh_transport.h"

namespace dtrain::agent {

namespace {

transport::SshOptions ssh_options(const proto::RelaySsh& ssh) {
  transport::SshOptions options;
  options.client = ssh.client == "openssh" ? SshClient::openssh : SshClient::libssh2;
  options.user = ssh.user;
  options.port = ssh.port > 0 ? ssh.port : 22;
  options.identity_files = ssh.identity_files;
  options.use_agent = ssh.use_agent;
  options.known_hosts = ssh.known_hosts;
  options.host_key_policy = ssh.host_key_policy == "insecure"     ? HostKeyPolicy::insecure
                            : ssh.host_key_policy == "accept-new" ? HostKeyPolicy::accept_new
                                                                  : HostKeyPolicy::strict;
  options.connect_timeout = Millis(ssh.connect_timeout_ms);
  options.provision_timeout = Millis(ssh.provision_timeout_ms);
  options.max_parallel = ssh.max_parallel;
  options.remote_dtrain = ssh.remote_dtrain;
  options.openssh_config = ssh.openssh_config;
  options.openssh_program = ssh.openssh_program;
  // local_binary stays empty: what a child lacks is copied from this relay's own binary, which is
  // the supervisor's version (the relay was provisioned with it).
  return options;
}

}  // namespace

Relay::Relay(const proto::RelaySsh& ssh, Send send) : send_(send), batcher_(std::move(send)) {
  transport::SshOptions options = ssh_options(ssh);
  if (options.client == SshClient::openssh) {
    transport_ = std::make_unique<transport::OpensshTransport>(std::move(options));
  } else {
    transport_ = std::make_unique<transport::SshTransport>(std::move(options));
  }
}

Relay::~Relay() { shutdown(0); }

void Relay::open(const std::vector<proto::RelayChild>& children) {
  for (const proto::RelayChild& wanted : children) {
    if (children_.count(wanted.host)) {
      send_(proto::RelayClosedReport{wanted.host, "relay_open named " + wanted.host + " twice"});
      continue;
    }
    transport::AgentTarget target{wanted.host, wanted.user, wanted.port, wanted.dtrain_path};
    Result<std::unique_ptr<transport::AgentConnection>> connection = transport_->start_agent(target);
    if (!connection) {
      send_(proto::RelayClosedReport{wanted.host, connection.error().message});
      continue;
    }
    children_[wanted.host].connection = std::move(connection).value();
  }
}

void Relay::to(const std::string& host, std::string bytes) {
  auto child = children_.find(host);
  if (child == children_.end() || child->second.closing) return;
  child->second.connection->send(std::move(bytes));
}

void Relay::close(const std::string& host) {
  auto child = children_.find(host);
  if (child == children_.end() || child->second.closing) return;
  child->second.closing = true;
  child->second.connection->close_input();
}

std::vector<pollfd> Relay::poll_fds() const {
  std::vector<pollfd> fds;
  for (const auto& [host, child] : children_) {
    for (pollfd fd : child.connection->poll_fds()) fds.push_back(fd);
  }
  return fds;
}

bool Relay::needs_periodic_pump() const {
  return batcher_.holding() || std::any_of(children_.begin(), children_.end(),
                     [](const auto& entry) { return entry.second.connection->needs_periodic_pump(); });
}

void Relay::pump(int64_t now_ms) {
  for (auto it = children_.begin(); it != children_.end();) {
    Child& child = it->second;
    child.connection->pump();
    batcher_.received(it->first, child.connection->take_received(), child.connection->take_diagnostics(), now_ms);
    if (child.connection->closed()) {
      batcher_.forget(it->first);
      send_(proto::RelayClosedReport{it->first, child.connection->close_reason()});
      child.connection->shutdown(0);
      it = children_.erase(it);
    } else {
      ++it;
    }
  }
  batcher_.flush_due(now_ms);
}

std::vector<pid_t> Relay::own_pids() const {
  std::vector<pid_t> pids;
  for (const auto& [host, child] : children_) {
    if (std::optional<pid_t> pid = child.connection->child_pid()) pids.push_back(*pid);
  }
  return pids;
}

void Relay::shutdown(int grace_ms) {
  batcher_.flush();
  for (auto& [host, child] : children_) child.connection->close_input();
  for (auto& [host, child] : children_) child.connection->shutdown(grace_ms);
  children_.clear();
}

}  // namespace dtrain::agent
