// `dtrain submit` on the namespace cluster (issue 4): 3 hosts × 2 slots over real SSH, run from
// the control namespace as a user would. Workers get torchrun's environment with the right
// ranks and MASTER_ADDR; the reference trainer trains across hosts; and after every ending —
// success, a worker failing on a remote host, Ctrl-C, kill -9 of the supervisor — no process of
// the run remains on any host. One run provisions dtrain onto a host that lacks it.

#include <doctest/doctest.h>

#include <signal.h>
#include <sys/stat.h>

#include <map>
#include <set>
#include <sstream>

#include "tests/integration/cluster_job.h"

using namespace dtrain::testing;

namespace {

// Prints one line of the worker's environment as the agent gave it, plus the host it runs on.
const char* kEnvPrinter =
    "[/bin/sh, -c, 'echo \"ENV RANK=$RANK LOCAL_RANK=$LOCAL_RANK GROUP_RANK=$GROUP_RANK "
    "WORLD_SIZE=$WORLD_SIZE LOCAL_WORLD_SIZE=$LOCAL_WORLD_SIZE GROUP_WORLD_SIZE=$GROUP_WORLD_SIZE "
    "MASTER_ADDR=$MASTER_ADDR MASTER_PORT=$MASTER_PORT HOST=$(hostname)\"']";

// Ignores SIGTERM (so only the KILL after the grace ends it) and leaves a grandchild in its own
// session: the agent must find and kill both.
const char* kStubbornWorker =
    "[/bin/sh, -c, 'setsid sleep 300 & trap \"\" TERM; echo ready; while :; do sleep 0.2; done']";

std::map<std::string, std::string> env_line(const std::string& log) {
  std::map<std::string, std::string> values;
  size_t at = log.find("ENV ");
  if (at == std::string::npos) return values;
  std::istringstream words(log.substr(at + 4, log.find('\n', at) - at - 4));
  std::string word;
  while (words >> word) {
    size_t eq = word.find('=');
    if (eq != std::string::npos) values[word.substr(0, eq)] = word.substr(eq + 1);
  }
  return values;
}

}  // namespace

TEST_CASE("3 hosts x 2 slots: every worker gets its ranks and host and MASTER_ADDR - the trainer trains") {
  TestCluster cluster(3);
  DTRAIN_REQUIRE_CLUSTER(cluster);

  ClusterJob env_job(cluster, "env");
  ClusterSpec spec;
  spec.name = "env";
  spec.command = kEnvPrinter;
  env_job.write_spec(spec);
  REQUIRE(env_job.run());
  INFO(env_job.err());
  REQUIRE(env_job.exit_code() == 0);
  nlohmann::json plan = env_job.plan(0);
  REQUIRE(plan["ranks"].size() == 6);
  std::set<std::string> ports;
  for (int rank = 0; rank < 6; ++rank) {
    auto env = env_line(env_job.rank_log(rank));
    INFO("rank " << rank << ": " << env_job.rank_log(rank));
    int host_index = rank / 2;
    CHECK(env["RANK"] == std::to_string(rank));
    CHECK(env["LOCAL_RANK"] == std::to_string(rank % 2));
    CHECK(env["GROUP_RANK"] == std::to_string(host_index));
    CHECK(env["WORLD_SIZE"] == "6");
    CHECK(env["LOCAL_WORLD_SIZE"] == "2");
    CHECK(env["GROUP_WORLD_SIZE"] == "3");
    CHECK(env["HOST"] == cluster.host(host_index + 1).name);  // really ran there
    CHECK(plan["ranks"][rank]["host"] == cluster.host(host_index + 1).name);
    CHECK(env["MASTER_ADDR"] == cluster.host(1).name);  // rank 0's host
    CHECK(!env["MASTER_PORT"].empty());
    ports.insert(env["MASTER_PORT"]);
  }
  CHECK(ports.size() == 1);
  check_nothing_left(cluster, env_job);

  ClusterJob train(cluster, "train");
  spec.name = "train";
  spec.command = trainer_command(100);
  spec.extra = "batch: {global: 24, micro: 2}\n";
  train.write_spec(spec, 50);
  REQUIRE(train.run());
  INFO(train.err());
  CHECK(train.exit_code() == 0);
  std::string expected = final_line(train.rank_log(0));
  CHECK(expected.find("final step=100") != std::string::npos);
  for (int rank = 1; rank < 6; ++rank) CHECK(final_line(train.rank_log(rank)) == expected);
  CHECK(train.rank_log(0).find("world 6 (dp 6 x pp 1 x tp 1)") != std::string::npos);
  // Checkpoints were written by rank 0 on its host into the shared directory.
  struct stat info {};
  CHECK(::stat((train.checkpoint_dir() + "/step-100/MANIFEST.json").c_str(), &info) == 0);
  check_nothing_left(cluster, train);
}

TEST_CASE("a worker failing on a remote host fails the run naming that host and rank - nothing left") {
  TestCluster cluster(3);
  DTRAIN_REQUIRE_CLUSTER(cluster);
  ClusterJob job(cluster, "fail");
  ClusterSpec spec;
  spec.name = "fail";
  spec.command = "[/bin/sh, -c, 'if [ \"$RANK\" = 3 ]; then sleep 1; echo rank 3 gives up >&2; exit 3; fi; exec sleep 120']";
  job.write_spec(spec);
  REQUIRE(job.run());
  std::string err = job.err();
  INFO(err);
  CHECK(job.exit_code() == 1);
  CHECK(err.find("root cause: rank 3 (local rank 1) on host " + cluster.host(2).name) != std::string::npos);
  CHECK(err.find("exit code 3") != std::string::npos);
  nlohmann::json state = nlohmann::json::parse(read_text(job.run_dir() + "/state.json"));
  CHECK(state["root_cause"]["host"] == cluster.host(2).name);
  CHECK(state["root_cause"]["rank"] == 3);
  CHECK(job.rank_log(3).find("rank 3 gives up") != std::string::npos);
  check_nothing_left(cluster, job);
}

TEST_CASE("Ctrl-C: exit 130 - stubborn workers and their daemonised children gone from every host") {
  TestCluster cluster(3);
  DTRAIN_REQUIRE_CLUSTER(cluster);
  ClusterJob job(cluster, "int");
  ClusterSpec spec;
  spec.name = "int";
  spec.command = kStubbornWorker;
  job.write_spec(spec);
  job.start();
  REQUIRE(job.wait_exec());
  REQUIRE(job.wait_running(0, 30000));
  // Every worker is up on its host, daemonised grandchild included.
  REQUIRE(wait_until([&] { return processes_of_run(job.run_id()).size() >= 12; }, 10000));
  REQUIRE(::kill(job.pid(), SIGINT) == 0);
  REQUIRE(job.wait(20000));
  INFO(job.err());
  CHECK(job.exit_code() == 130);
  auto released = job.events("resources.released");
  CHECK(released.size() == 3);
  check_nothing_left(cluster, job);
}

TEST_CASE("kill -9 of the supervisor: every remote agent fences itself - nothing left on any host") {
  TestCluster cluster(3);
  DTRAIN_REQUIRE_CLUSTER(cluster);
  ClusterJob job(cluster, "k9");
  ClusterSpec spec;
  spec.name = "k9";
  spec.command = kStubbornWorker;
  job.write_spec(spec);
  job.start();
  REQUIRE(job.wait_exec());
  REQUIRE(job.wait_running(0, 30000));
  REQUIRE(wait_until([&] { return processes_of_run(job.run_id()).size() >= 12; }, 10000));
  int64_t killed_at = now_ms();
  REQUIRE(::kill(job.pid(), SIGKILL) == 0);
  job.wait(5000);
  // heartbeat.timeout (2s) bounds the fence; then TERM, the fence grace (≤ timeout), KILL.
  std::string left = leftovers(cluster, job.run_id(), 2000 + 2000 + 3000);
  CHECK_MESSAGE(left.empty(), "left behind after kill -9 of the supervisor:\n" << left);
  MESSAGE("hosts clean " << now_ms() - killed_at << " ms after kill -9 of the supervisor");
}

TEST_CASE("provisioning: dtrain copies itself to a host that lacks it and the job runs there") {
  TestCluster cluster(1);
  DTRAIN_REQUIRE_CLUSTER(cluster);
  std::string cache = cluster.host(1).home() + "/.cache/dtrain";
  struct stat info {};
  REQUIRE(::stat(cache.c_str(), &info) != 0);  // a fresh host: nothing cached yet

  ClusterJob job(cluster, "prov");
  ClusterSpec spec;
  spec.name = "prov";
  spec.hosts = {1};
  spec.slots = 1;
  spec.remote_dtrain = false;
  spec.command = "[/bin/sh, -c, 'echo \"agent is $(readlink /proc/$PPID/exe)\"']";
  job.write_spec(spec);
  REQUIRE(job.run({}, 120000));
  INFO(job.err());
  CHECK(job.exit_code() == 0);
  // The worker's parent (the agent) runs the copy in the host's own cache, not the build tree.
  std::string log = job.rank_log(0);
  INFO(log);
  size_t shown = log.find("agent is ");
  REQUIRE(shown != std::string::npos);
  std::string agent_exe = log.substr(shown + 9, log.find('\n', shown) - shown - 9);
  CHECK(agent_exe.find("/.cache/dtrain/") != std::string::npos);  // the host's home, mounted as ~
  CHECK(agent_exe.find(DTRAIN_BINARY_DIR) == std::string::npos);
  CommandOutput listed = run_command({"find", cache, "-type", "f"});
  CHECK(listed.output.find("dtrain") != std::string::npos);
  check_nothing_left(cluster, job);
}
