// The relay tree's shape (launcher/run/relay_tree.h): when there is one, how many relays, that
// they are job hosts spread over the list and never spares, that every other host has exactly
// one relay and no relay carries more than its fanout; and a relayed connection's bytes (in
// pieces under the frame limit) and its end.
#include <doctest/doctest.h>

#include <set>
#include <string>
#include <vector>

#include "launcher/proto/frame.h"
#include "launcher/run/relay_tree.h"
#include "launcher/run/relayed_connection.h"

using namespace dtrain;
using namespace dtrain::run;

namespace {

std::vector<std::string> names(const std::string& prefix, int count) {
  std::vector<std::string> out;
  for (int i = 1; i <= count; ++i) out.push_back(prefix + std::to_string(i));
  return out;
}

spec::ScaleSettings scale(spec::RelayTreeMode tree, int fanout = 0) { return {tree, fanout}; }

/// Every host but the relays has exactly one relay, which lists it; relays are job hosts.
void check_shape(const RelayTree& tree, const std::vector<std::string>& hosts, const std::vector<std::string>& spares,
                 size_t fanout) {
  std::set<std::string> relays;
  for (const auto& [relay, children] : tree.children) {
    relays.insert(relay);
    CHECK(std::find(hosts.begin(), hosts.end(), relay) != hosts.end());
    CHECK(children.size() <= fanout);
    CHECK_FALSE(children.empty());
    for (const std::string& child : children) CHECK(tree.relay_of.at(child) == relay);
  }
  std::vector<std::string> all = hosts;
  all.insert(all.end(), spares.begin(), spares.end());
  for (const std::string& host : all) CHECK((relays.count(host) == 1) != (tree.relay_of.count(host) == 1));
}

}  // namespace

TEST_CASE("no tree when scale.tree is off, below the auto threshold, or without SSH") {
  CHECK(plan_relay_tree(names("h", 8), {}, scale(spec::RelayTreeMode::auto_select), true).empty());
  CHECK(plan_relay_tree(names("h", 4096), {}, scale(spec::RelayTreeMode::off), true).empty());
  CHECK(plan_relay_tree(names("h", 4096), {}, scale(spec::RelayTreeMode::on), false).empty());
  CHECK(plan_relay_tree(names("h", 1), {}, scale(spec::RelayTreeMode::on), true).empty());
  CHECK_FALSE(plan_relay_tree(names("h", spec::kRelayTreeFromHosts), {}, scale(spec::RelayTreeMode::auto_select), true).empty());
}

TEST_CASE("16,384 hosts: 128 relays of at most 128 hosts each, spread over the list") {
  std::vector<std::string> hosts = names("gpu", 16'384);
  RelayTree tree = plan_relay_tree(hosts, {}, scale(spec::RelayTreeMode::auto_select), true);
  CHECK(tree.children.size() == 128);
  check_shape(tree, hosts, {}, 128);
  CHECK(tree.children.count("gpu1") == 1);
  CHECK(tree.children.count("gpu129") == 1);  // every 128th host relays
}

TEST_CASE("spares are relayed, never relays - a small tree with fanout 2") {
  std::vector<std::string> hosts = names("h", 4);
  std::vector<std::string> spares = {"spare1"};
  RelayTree tree = plan_relay_tree(hosts, spares, scale(spec::RelayTreeMode::on, 2), true);
  check_shape(tree, hosts, spares, 2);
  CHECK(tree.children.size() == 2);
  CHECK(tree.children.at("h1") == std::vector<std::string>{"h2", "h4"});
  CHECK(tree.children.at("h3") == std::vector<std::string>{"spare1"});
  CHECK(tree.relay_of.count("spare1") == 1);

  // Only spares besides one host: the host relays them all, whatever the fanout says.
  RelayTree one = plan_relay_tree({"h1"}, names("s", 5), scale(spec::RelayTreeMode::on, 2), true);
  CHECK(one.children.at("h1").size() == 5);
}

TEST_CASE("a relayed connection: bytes out in pieces under the frame limit, bytes in, its end") {
  std::vector<proto::SupervisorMessage> sent;
  bool relay_up = true;
  RelayedConnection connection("h2", "h1", [&](const proto::SupervisorMessage& message) {
    if (relay_up) sent.push_back(message);
    return relay_up;
  });
  CHECK(connection.describe() == "h2 (relayed by h1)");
  CHECK(connection.poll_fds().empty());
  std::string big(proto::kMaxRelayChunkBytes * 2 + 10, 'x');
  connection.send(big);
  REQUIRE(sent.size() == 3);
  std::string joined;
  for (const proto::SupervisorMessage& message : sent) {
    const auto& to = std::get<proto::RelayToRequest>(message);
    CHECK(to.host == "h2");
    joined += to.data;
    CHECK(proto::encode_frame_checked(proto::to_json(message)).ok());  // each piece is a frame the agent takes
  }
  CHECK(joined == big);

  connection.deliver("abc", "agent h2: hello\n");
  connection.deliver("def", "");
  CHECK(connection.take_received() == "abcdef");
  CHECK(connection.take_diagnostics() == "agent h2: hello\n");
  CHECK_FALSE(connection.closed());

  connection.close_input();
  connection.close_input();  // once
  REQUIRE(sent.size() == 4);
  CHECK(std::get<proto::RelayCloseRequest>(sent.back()).host == "h2");
  connection.send("late");  // after close_input: dropped
  CHECK(sent.size() == 4);

  connection.end("its relay h1 was lost (nothing received for 10s)");
  CHECK(connection.closed());
  CHECK(connection.close_reason() == "its relay h1 was lost (nothing received for 10s)");
  connection.deliver("more", "");  // after the end: nothing
  CHECK(connection.take_received().empty());
}
