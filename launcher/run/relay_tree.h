#pragma once
// Which host relays which (issue 32, docs/architecture.md §1 "Relays"): the shape of a run's
// relay tree, as data. Pure: the driver starts the relays' agents itself and the others through
// them (relayed_connection.h).

#include <map>
#include <string>
#include <vector>

#include "launcher/proto/relay_messages.h"
#include "launcher/spec/job_spec.h"
#include "launcher/transport/ssh_transport.h"

namespace dtrain::run {

struct RelayTree {
  std::map<std::string, std::vector<std::string>> children;  ///< relay → the hosts it reaches, in spec order
  std::map<std::string, std::string> relay_of;               ///< relayed host → its relay
  bool empty() const { return children.empty(); }
};

/// The tree for `hosts` (the job's, which may relay) and `spares` (never relays: a spare is idle
/// until it replaces a host, and its loss must cost nothing), both only those reached over SSH.
/// No tree when scale.tree is off, or auto with fewer than spec::kRelayTreeFromHosts of them,
/// or `ssh` is false (srun, kubectl). Otherwise about (hosts + spares) / (fanout + 1) relays
/// spread evenly over the job's hosts, each reaching a block of up to `fanout` consecutive
/// others (fanout 0: √(hosts + spares), so that both levels hold about as many connections).
RelayTree plan_relay_tree(const std::vector<std::string>& hosts, const std::vector<std::string>& spares,
                          const spec::ScaleSettings& scale, bool ssh);

/// The run's SSH settings as a relay needs them (relay_open.ssh).
proto::RelaySsh relay_ssh(const transport::SshOptions& options);

}  // namespace dtrain::run
