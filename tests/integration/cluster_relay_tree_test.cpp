// A relay tree on the namespace cluster (issue 32, spec scale:): with scale.tree on and fanout 2,
// the supervisor reaches two relays and they start the other hosts' agents over real SSH. The
// proof is in the workers' own environment: sshd sets SSH_CONNECTION, whose first field is the
// address the session came from (the control namespace for a relay's workers, the relay's host
// for the others'). The job trains to a fault-free run's loss. When a relay's host is killed, the
// host it relayed is not lost with it: its agent keeps its workers and waits, the supervisor
// re-attaches to it directly, a spare takes the relay's ranks, and nothing of the run remains on
// any host.

#include <doctest/doctest.h>

#include <cmath>
#include <set>

#include "tests/integration/cluster_job.h"

using namespace dtrain::testing;

namespace {

constexpr int kSteps = 300;

/// Hosts 1-3 and spare 4 (4 SSH hosts, fanout 2: relays h1 and h2; h1 relays h3, h2 the spare).
/// Each worker first prints where its agent's SSH session came from.
ClusterSpec tree_job(const std::string& name) {
  ClusterSpec spec = shrinkable_trainer_job(name, kSteps);
  spec.spares = {4};
  spec.command = "[/bin/sh, -c, 'echo \"SSH_FROM ${SSH_CONNECTION%% *}\"; exec dtrain-train --steps " +
                 std::to_string(kSteps) + " --log-every 50']";
  spec.extra += "scale: {tree: on, fanout: 2}\n";
  return spec;
}

void check_final_loss(ClusterJob& job, int world_size) { check_shrinkable_final_loss(job, world_size, kSteps); }

/// The address rank `rank`'s agent session came from, as its worker printed it.
std::string ssh_from(ClusterJob& job, int rank) {
  std::string log = job.rank_log(rank);
  size_t at = log.find("SSH_FROM ");
  if (at == std::string::npos) return "";
  return log.substr(at + 9, log.find('\n', at) - at - 9);
}

/// Starts `job` (tree_job) and waits until it committed its checkpoint of step 100.
void start_past_checkpoint(ClusterJob& job, const std::string& name) {
  job.write_spec(tree_job(name), 50);
  job.start();
  REQUIRE(job.wait_exec());
  REQUIRE(job.wait_checkpoint(100, 90000));
}

/// h3, the host relay h1 carried, was re-attached directly once: one host.reattached event.
void check_h3_reattached_from_h1(const TestCluster& cluster, ClusterJob& job) {
  auto reattached = job.events("host.reattached");
  REQUIRE(reattached.size() == 1);
  CHECK(reattached[0].value("host", "") == cluster.host(3).name);
  CHECK(reattached[0].value("from", "") == cluster.host(1).name);
  CHECK(reattached[0].value("gap_ms", -1) >= 0);
  CHECK(reattached[0].value("workers", -1) >= 0);
}

}  // namespace

TEST_CASE("relay tree, fanout 2: h3's agent is started by relay h1 over SSH, and the job trains to the same loss") {
  TestCluster cluster(4);
  DTRAIN_REQUIRE_CLUSTER(cluster);
  ClusterJob job(cluster, "tree");
  job.write_spec(tree_job("tree"), 50);
  REQUIRE(job.run());
  INFO(job.err());
  REQUIRE(job.exit_code() == 0);

  // Ranks 0-1 on h1 and 2-3 on h2 (relays: reached from the control namespace), 4-5 on h3
  // (reached from h1).
  std::string from_ctl = ssh_from(job, 0);
  CHECK(!from_ctl.empty());
  CHECK(from_ctl != cluster.host(1).ip);
  CHECK(ssh_from(job, 2) == from_ctl);
  CHECK(ssh_from(job, 4) == cluster.host(1).ip);
  std::string log = read_text(job.run_dir() + "/supervisor.log");
  CHECK(log.find("host " + cluster.host(1).name + ": relays 1 host") != std::string::npos);
  CHECK(log.find("host " + cluster.host(2).name + ": relays 1 host") != std::string::npos);
  CHECK(log.find(cluster.host(4).name + " (relayed by " + cluster.host(2).name + ")") != std::string::npos);
  CHECK(job.events("host.lost").empty());
  std::map<std::string, std::string> relayed_by;
  for (const auto& event : job.events("host.connected")) relayed_by[event.value("host", "")] = event.value("relayed_by", "-");
  CHECK(relayed_by == std::map<std::string, std::string>{{cluster.host(1).name, "-"},
                                                           {cluster.host(2).name, "-"},
                                                           {cluster.host(3).name, cluster.host(1).name},
                                                           {cluster.host(4).name, cluster.host(2).name}});
  check_final_loss(job, 6);
  check_nothing_left(cluster, job);
}

TEST_CASE("relay tree: the relay's host killed - the host it relayed is re-attached directly, only the relay is lost, a spare takes its ranks, nothing left") {
  TestCluster cluster(4);
  DTRAIN_REQUIRE_CLUSTER(cluster);
  ClusterJob job(cluster, "relay-killed");
  start_past_checkpoint(job, "relay-killed");
  // Every process of h1 dies, sshd and the relay's sessions to h3 with them.
  REQUIRE(cluster.kill(1).status == 0);
  REQUIRE(job.wait(120000));
  INFO(job.err());
  CHECK(job.exit_code() == 0);

  // 0 hosts falsely lost: h1 only. h3's agent kept its workers, waited, and the supervisor
  // reached it again directly.
  std::vector<std::string> lost;
  for (const auto& event : job.events("host.lost")) lost.push_back(event.value("host", ""));
  CHECK(lost == std::vector<std::string>{cluster.host(1).name});
  check_h3_reattached_from_h1(cluster, job);
  std::string log = read_text(job.run_dir() + "/supervisor.log");
  CHECK(log.find("host " + cluster.host(3).name + ": its relay " + cluster.host(1).name +
                 " was lost; re-attaching to its agent directly") != std::string::npos);
  // The spare h4 took h1's ranks: 3 hosts, the world kept. h3's ranks ran under the agent
  // that h1 had started (their SSH session came from h1), in both generations.
  nlohmann::json state = nlohmann::json::parse(read_text(job.run_dir() + "/state.json"));
  CHECK(state["world_size"] == 6);
  std::set<std::string> hosts;
  for (int rank = 0; rank < 6; ++rank) hosts.insert(state["ranks"][rank]["host"].get<std::string>());
  CHECK(hosts == std::set<std::string>{cluster.host(2).name, cluster.host(3).name, cluster.host(4).name});
  CHECK(job.events("recovery.completed").size() == 1);
  check_final_loss(job, 6);
  check_nothing_left(cluster, job);
}

TEST_CASE("relay tree: the relay's host partitioned - lost by its silence, the host it relayed re-attached directly, nothing left") {
  TestCluster cluster(4);
  DTRAIN_REQUIRE_CLUSTER(cluster);
  ClusterJob job(cluster, "relay-cut");
  start_past_checkpoint(job, "relay-cut");
  // h1 stays alive but reaches nobody: the supervisor hears neither it nor (through it) h3;
  // h3's agent hears no supervisor either. Its silence must cost h1 only.
  REQUIRE(cluster.partition(1).status == 0);
  REQUIRE(job.wait(120000));
  INFO(job.err());
  CHECK(job.exit_code() == 0);

  std::map<std::string, std::string> lost;
  for (const auto& event : job.events("host.lost")) lost[event.value("host", "")] = event.value("reason", "");
  CHECK(lost.size() == 1);
  CHECK_MESSAGE(lost[cluster.host(1).name].find("nothing received for") != std::string::npos, lost[cluster.host(1).name]);
  check_h3_reattached_from_h1(cluster, job);
  nlohmann::json state = nlohmann::json::parse(read_text(job.run_dir() + "/state.json"));
  CHECK(state["world_size"] == 6);
  check_final_loss(job, 6);
  // h1's agent fenced itself when its supervisor fell silent: only sshd sessions stuck on dead TCP
  // connections (the supervisor's to h1, h1's relay session to h3) may stay until heal.
  for (int host : {1, 3}) {
    std::string left = wait_only_sshd_left(cluster, host, 10000);
    CHECK_MESSAGE(left.empty(), "still on h" << host << ":\n" << left);
  }
  REQUIRE(cluster.heal(1).status == 0);
  // After heal the stale sessions learn their connections are gone and end too.
  check_nothing_left(cluster, job, 30000);
}

TEST_CASE("relay tree: a relay's host down at submit costs only itself - the host it would relay is reached directly") {
  TestCluster cluster(4);
  DTRAIN_REQUIRE_CLUSTER(cluster);
  REQUIRE(cluster.kill(1).status == 0);  // h1, a relay by the plan, has no sshd
  ClusterJob job(cluster, "relay-down");
  job.write_spec(tree_job("relay-down"), 50);
  REQUIRE(job.run());
  INFO(job.err());
  CHECK(job.exit_code() == 0);

  std::vector<std::string> lost;
  for (const auto& event : job.events("host.lost")) lost.push_back(event.value("host", ""));
  CHECK(lost == std::vector<std::string>{cluster.host(1).name});
  std::string log = read_text(job.run_dir() + "/supervisor.log");
  CHECK(log.find(cluster.host(1).name + " was lost before it could relay: its 1 host reached directly") !=
        std::string::npos);
  // h2, h3 and the spare h4 (relayed by h2) run the 6 ranks; h3's agent was reached from the
  // control namespace, the spare's from h2.
  nlohmann::json state = nlohmann::json::parse(read_text(job.run_dir() + "/state.json"));
  CHECK(state["world_size"] == 6);
  std::map<std::string, std::string> from_by_host;
  for (int rank = 0; rank < 6; ++rank) from_by_host[state["ranks"][rank]["host"].get<std::string>()] = ssh_from(job, rank);
  CHECK(from_by_host.count(cluster.host(1).name) == 0);
  CHECK(from_by_host[cluster.host(4).name] == cluster.host(2).ip);
  CHECK(from_by_host[cluster.host(3).name] != cluster.host(1).ip);
  CHECK(from_by_host[cluster.host(3).name] == from_by_host[cluster.host(2).name]);
  check_final_loss(job, 6);
  check_nothing_left(cluster, job);
}
