// RunDriver and the relay tree (issue 32; relay_tree.h, relayed_connection.h): which host
// relays which, connecting a relayed host through its relay, carrying relay frames to the
// relayed hosts' links, and a relay's loss.

#include "launcher/run/driver.h"

#include <algorithm>

#include "launcher/events/events.h"
#include "launcher/hosts/run_hosts.h"

namespace dtrain::run {

RelayTree RunDriver::plan_run_relay_tree(const std::vector<spec::HostEntry>& hosts) const {
  std::vector<std::string> job_hosts;
  std::vector<std::string> spares;
  for (const spec::HostEntry& host : hosts) {
    if (!transports_.reached_over_ssh(host)) continue;
    bool spare = std::any_of(spec_.spares.begin(), spec_.spares.end(),
                             [&](const spec::HostEntry& entry) { return entry.name == host.name; });
    (spare ? spares : job_hosts).push_back(host.name);
  }
  return plan_relay_tree(job_hosts, spares, spec_.scale, true);
}

Result<std::unique_ptr<transport::AgentConnection>> RunDriver::connect_agent(const spec::HostEntry& host) {
  auto relay_name = relay_tree_.relay_of.find(host.name);
  if (relay_name == relay_tree_.relay_of.end()) return transports_.start_agent(host);
  auto to_relay = [this, relay_host = relay_name->second](const proto::SupervisorMessage& message) {
    auto link = links_.find(relay_host);
    if (link == links_.end() || link->second->lost || link->second->connection().closed()) return false;
    return link->second->send(message);
  };
  auto connection = std::make_unique<RelayedConnection>(host.name, relay_name->second, to_relay);
  relayed_[host.name] = connection.get();
  return std::unique_ptr<transport::AgentConnection>(std::move(connection));
}

void RunDriver::agent_connected(AgentLink& link) { open_relay(link); }

void RunDriver::open_relay(AgentLink& link) {
  auto children = relay_tree_.children.find(link.host());
  if (children == relay_tree_.children.end()) return;
  proto::RelayOpenRequest open{relay_ssh(hosts::ssh_options_for(spec_)), {}};
  std::vector<spec::HostEntry> starting;
  for (auto host = waiting_for_relay_.begin(); host != waiting_for_relay_.end();) {
    auto relay = relay_tree_.relay_of.find(host->name);
    if (relay == relay_tree_.relay_of.end() || relay->second != link.host()) {
      ++host;
      continue;
    }
    transport::AgentTarget target = transports_.target_for(*host);
    open.children.push_back({target.host, target.user, target.port, target.dtrain_path});
    starting.push_back(std::move(*host));
    host = waiting_for_relay_.erase(host);
  }
  if (starting.empty()) return;
  link.send(open);
  log().info("host {}: relays {} host{}", link.host(), open.children.size(), open.children.size() == 1 ? "" : "s");
  // After relay_open on the relay's link: each one's config follows it there.
  for (const spec::HostEntry& host : starting) start_agent(host);
}

void RunDriver::start_orphans_directly(const std::string& relay) {
  std::vector<spec::HostEntry> orphans;
  std::erase_if(waiting_for_relay_, [&](const spec::HostEntry& host) {
    auto of = relay_tree_.relay_of.find(host.name);
    if (of == relay_tree_.relay_of.end() || of->second != relay) return false;
    orphans.push_back(host);
    relay_tree_.relay_of.erase(of);
    return true;
  });
  if (orphans.empty()) return;
  log().warn("host {} was lost before it could relay: its {} host{} reached directly", relay, orphans.size(),
             orphans.size() == 1 ? "" : "s");
  for (const spec::HostEntry& host : orphans) start_agent(host);
}

RelayedConnection* RunDriver::relayed_by(const AgentLink& relay, const std::string& host) {
  auto connection = relayed_.find(host);
  if (connection == relayed_.end() || connection->second->relay() != relay.host()) return nullptr;
  return connection->second;
}

void RunDriver::relay_from(AgentLink& relay, proto::RelayFromReport from) {
  RelayedConnection* connection = relayed_by(relay, from.host);
  if (connection == nullptr) {
    // Untrusted like any frame: a relay speaks only for the hosts it was given.
    std::string problem = "relay_from for '" + from.host.substr(0, 64) + "', a host this agent does not relay";
    log().warn("agent {}: {}", relay.host(), problem);
    record(events::AgentError{relay.host(), problem}.to_json());
    return;
  }
  connection->deliver(std::move(from.data), std::move(from.diagnostics));
  relayed_fed_.push_back(links_.at(from.host).get());
}

void RunDriver::relay_closed(AgentLink& relay, const proto::RelayClosedReport& closed) {
  RelayedConnection* connection = relayed_by(relay, closed.host);
  if (connection == nullptr) return;  // a host it never relayed: nothing to end
  connection->end(closed.reason + " (relayed by " + relay.host() + ")");
  relayed_fed_.push_back(links_.at(closed.host).get());
}

void RunDriver::lose_relayed_hosts(const AgentLink& relay, const std::string& reason) {
  start_orphans_directly(relay.host());
  auto children = relay_tree_.children.find(relay.host());
  if (children == relay_tree_.children.end()) return;
  for (const std::string& host : children->second) {
    auto connection = relayed_.find(host);
    if (connection == relayed_.end() || connection->second->closed()) continue;
    connection->second->end("its relay " + relay.host() + " was lost (" + reason + ")");
    relayed_fed_.push_back(links_.at(host).get());
  }
  pump_relayed();
}

void RunDriver::pump_relayed() {
  while (!relayed_fed_.empty()) {
    std::vector<AgentLink*> fed = std::exchange(relayed_fed_, {});
    std::sort(fed.begin(), fed.end());
    fed.erase(std::unique(fed.begin(), fed.end()), fed.end());
    pump_links(fed);
  }
}

}  // namespace dtrain::run
