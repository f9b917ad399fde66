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
    if (!transports_.reached_over_ssh(host) && !relay_over_transport_) continue;
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
  relayed_[host.name] = Relayed{connection.get(), nullptr};
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

RunDriver::Relayed* RunDriver::relayed_by(const AgentLink& relay, const std::string& host) {
  auto relayed = relayed_.find(host);
  if (relayed == relayed_.end() || relayed->second.link == nullptr || relayed->second.connection->relay() != relay.host()) {
    return nullptr;
  }
  return &relayed->second;
}

void RunDriver::refuse_relayed(const AgentLink& relay, const char* frame, const std::string& host) {
  // Untrusted like any frame: a relay speaks only for the hosts it was given.
  std::string problem = std::string(frame) + " for '" + host.substr(0, 64) + "', a host this agent does not relay";
  log().warn("agent {}: {}", relay.host(), problem);
  record(events::AgentError{relay.host(), problem}.to_json());
}

void RunDriver::relay_from(AgentLink& relay, proto::RelayFromReport from) {
  Relayed* relayed = relayed_by(relay, from.host);
  if (relayed == nullptr) return refuse_relayed(relay, "relay_from", from.host);
  relayed->connection->deliver(std::move(from.data), std::move(from.diagnostics));
  relayed_fed_.push_back(relayed->link);
}

void RunDriver::relay_batch(AgentLink& relay, proto::RelayBatchReport batch) {
  // What the relay carried before this batch (relay_from) is read first: each host's messages
  // stay in the order it sent them.
  pump_relayed();
  const int64_t now = clock_.monotonic_ms();
  for (const proto::RelayedMessage& relayed : batch.messages) {
    Relayed* host = relayed_by(relay, relayed.host);
    if (host == nullptr) {
      refuse_relayed(relay, "relay_batch", relayed.host);
      continue;
    }
    if (host->link->lost || relay.lost) continue;
    host->link->heard(now);
    router_.route_relayed(*host->link, relayed);
  }
}

void RunDriver::relay_closed(AgentLink& relay, const proto::RelayClosedReport& closed) {
  Relayed* relayed = relayed_by(relay, closed.host);
  if (relayed == nullptr) return;  // a host it never relayed: nothing to end
  relayed->connection->end(closed.reason + " (relayed by " + relay.host() + ")");
  relayed_fed_.push_back(relayed->link);
}

const spec::HostEntry* RunDriver::host_entry(const std::string& host) const {
  for (const auto* hosts : {&spec_.hosts, &spec_.spares}) {
    for (const spec::HostEntry& candidate : *hosts) {
      if (candidate.name == host) return &candidate;
    }
  }
  return nullptr;
}

void RunDriver::lose_relayed_hosts(const AgentLink& relay, const std::string& reason) {
  // Those re-attachable were re-attached already (reattach_relayed_hosts). A host whose agent
  // had not said hello yet has nothing to keep: a fresh agent is started on it directly, on the
  // same link. The others' sessions end (pump_links loses them).
  start_orphans_directly(relay.host());
  auto children = relay_tree_.children.find(relay.host());
  if (children == relay_tree_.children.end()) return;
  for (const std::string& host : children->second) {
    auto connection = relayed_.find(host);
    if (connection == relayed_.end() || connection->second.connection->closed()) continue;
    AgentLink& link = *links_.at(host);
    const spec::HostEntry* entry = host_entry(host);
    if (!link.connected && !link.lost && entry != nullptr && !finished_) {
      relayed_.erase(connection);
      relay_tree_.relay_of.erase(host);
      Result<std::unique_ptr<transport::AgentConnection>> direct = transports_.start_agent(*entry);
      if (direct) {
        link.replace_connection(std::move(direct).value(), clock_.monotonic_ms(), clock_.wall_ms());
        link.relayed_by.clear();
        send_config(link);
        links_added_ = true;
        log().warn("host {}: its relay {} was lost before its agent said hello: started directly", host, relay.host());
        continue;
      }
      host_lost(link, "its relay " + relay.host() + " was lost (" + reason + ") and starting its agent directly failed: " +
                          direct.error().message);
      continue;
    }
    connection->second.connection->end("its relay " + relay.host() + " was lost (" + reason + ")");
    relayed_fed_.push_back(&link);
  }
  pump_relayed();
}

bool RunDriver::can_reattach(const AgentLink& link) const {
  // A relayed host that said hello and listens for a re-attach outlives its relay's session.
  return !link.lost && !link.relayed_by.empty() && link.connected && !link.attach_socket.empty() && !finished_;
}

void RunDriver::connection_ended(AgentLink& link) {
  std::string reason = link.connection().close_reason();
  if (link.reattaching) {
    return host_lost(link, "re-attaching after its relay " + link.reattaching->from + " was lost failed: " + reason);
  }
  // A relayed session that ended while its relay lives (relay_closed): the host's agent or the
  // host itself is gone, as with a direct connection. Only a relay's loss re-attaches.
  host_lost(link, "agent connection closed: " + reason);
}

void RunDriver::reattach_relayed_hosts(const AgentLink& relay) {
  auto children = relay_tree_.children.find(relay.host());
  if (children == relay_tree_.children.end()) return;
  for (const std::string& host : children->second) {
    auto link = links_.find(host);
    if (link == links_.end() || !relayed_.count(host) || !can_reattach(*link->second)) continue;
    if (link->second->relayed_by != relay.host()) continue;
    reattach_directly(*link->second, "its relay " + relay.host() + " was lost");
  }
}

void RunDriver::reattach_directly(AgentLink& link, const std::string& reason) {
  const std::string host = link.host();
  std::string relay = link.relayed_by;
  const spec::HostEntry* entry = host_entry(host);
  relayed_.erase(host);
  relay_tree_.relay_of.erase(host);
  Result<std::unique_ptr<transport::AgentConnection>> connection =
      entry ? transports_.start_agent(*entry) : Result<std::unique_ptr<transport::AgentConnection>>(Error::internal("no such host"));
  if (!connection) {
    return host_lost(link, "agent connection closed: " + reason + "; re-attaching directly failed: " + connection.error().message);
  }
  int64_t now = clock_.monotonic_ms();
  link.replace_connection(std::move(connection).value(), now, clock_.wall_ms());
  link.relayed_by.clear();
  link.reattaching = AgentLink::Reattach{relay, reason, now};
  link.send(proto::AgentAttachRequest{link.attach_socket});
  links_added_ = true;  // its new connection has fds of its own: the loop lists it again
  log().warn("host {}: {}; re-attaching to its agent directly ({})", host, reason, link.connection().describe());
}

void RunDriver::agent_reattached(AgentLink& link, const proto::ReattachedReport& report) {
  int64_t gap_ms = clock_.monotonic_ms() - link.reattaching->started_ms;
  record(events::HostReattached{link.host(), link.reattaching->from, report.detached_ms, gap_ms,
                                static_cast<int64_t>(report.workers.size())}
             .to_json());
  log().info("host {}: re-attached directly after its relay {} was lost: {} worker{} kept ({} ms)", link.host(),
             link.reattaching->from, report.workers.size(), report.workers.size() == 1 ? "" : "s", gap_ms);
  link.reattaching.reset();
}

void RunDriver::ping_through_relays(std::unordered_map<std::string, std::vector<std::string>>& hosts_by_relay) {
  // One relay_fanout per relay, not one relay_to per host: at 16,384 relayed hosts those were a
  // tenth of the loop. The pong's id is not matched to its ping; each pong measures its own
  // host's clock offset.
  if (hosts_by_relay.empty()) return;
  Result<std::string> ping_frame =
      proto::encode_supervisor_frame(proto::PingRequest{launcher_.take_request_id(), clock_.wall_ms()});
  if (!ping_frame) return;  // a ping is a few dozen bytes: never over the limit
  for (auto& [relay, hosts] : hosts_by_relay) {
    auto relay_link = links_.find(relay);
    if (relay_link == links_.end() || relay_link->second->lost || relay_link->second->connection().closed()) continue;
    // In frames far below the frame limit however many hosts a relay has.
    proto::RelayFanoutRequest fanout{{}, *ping_frame};
    size_t names_bytes = 0;
    for (std::string& host : hosts) {
      names_bytes += host.size() + 4;
      fanout.hosts.push_back(std::move(host));
      if (names_bytes >= proto::kMaxRelayChunkBytes) {
        relay_link->second->send(fanout);
        fanout.hosts.clear();
        names_bytes = 0;
      }
    }
    if (!fanout.hosts.empty()) relay_link->second->send(fanout);
  }
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
