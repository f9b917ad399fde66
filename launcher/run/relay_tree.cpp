#include "launcher/run/relay_tree.h"

#include <algorithm>
#include <cmath>

namespace dtrain::run {

RelayTree plan_relay_tree(const std::vector<std::string>& hosts, const std::vector<std::string>& spares,
                          const spec::ScaleSettings& scale, bool ssh) {
  RelayTree tree;
  const size_t total = hosts.size() + spares.size();
  if (!ssh || hosts.empty() || total < 2 || scale.tree == spec::RelayTreeMode::off) return tree;
  if (scale.tree == spec::RelayTreeMode::auto_select && total < static_cast<size_t>(spec::kRelayTreeFromHosts)) return tree;
  const size_t fanout = scale.fanout > 0 ? static_cast<size_t>(scale.fanout)
                                         : std::max<size_t>(2, static_cast<size_t>(std::ceil(std::sqrt(double(total)))));
  // Each relay is a host too: fanout + 1 hosts per relay.
  const size_t relays = std::clamp<size_t>((total + fanout) / (fanout + 1), 1, hosts.size());
  std::vector<bool> is_relay(hosts.size(), false);
  std::vector<std::string> relay_names;
  for (size_t i = 0; i < relays; ++i) {
    size_t index = i * hosts.size() / relays;  // spread over the job's hosts: racks in name order share the load
    is_relay[index] = true;
    relay_names.push_back(hosts[index]);
  }
  std::vector<std::string> others;
  for (size_t i = 0; i < hosts.size(); ++i) {
    if (!is_relay[i]) others.push_back(hosts[i]);
  }
  others.insert(others.end(), spares.begin(), spares.end());
  for (const std::string& relay : relay_names) tree.children[relay];
  for (size_t j = 0; j < others.size(); ++j) {
    const std::string& relay = relay_names[j * relays / others.size()];  // consecutive blocks
    tree.children[relay].push_back(others[j]);
    tree.relay_of[others[j]] = relay;
  }
  // A relay with nothing to carry is an ordinary host.
  for (auto it = tree.children.begin(); it != tree.children.end();) {
    it = it->second.empty() ? tree.children.erase(it) : std::next(it);
  }
  return tree;
}

proto::RelaySsh relay_ssh(const transport::SshOptions& options) {
  proto::RelaySsh ssh;
  ssh.client = to_string(options.client);
  ssh.user = options.user;
  ssh.port = options.port;
  ssh.identity_files = options.identity_files;
  ssh.use_agent = options.use_agent;
  ssh.known_hosts = options.known_hosts;
  ssh.host_key_policy = to_string(options.host_key_policy);
  ssh.connect_timeout_ms = options.connect_timeout.count();
  ssh.provision_timeout_ms = options.provision_timeout.count();
  ssh.max_parallel = options.max_parallel;
  ssh.remote_dtrain = options.remote_dtrain;
  ssh.openssh_config = options.openssh_config;
  ssh.openssh_program = options.openssh_program;
  return ssh;
}

}  // namespace dtrain::run
