// One restart count for the whole job (issue 28): under torchrun each host's agent counts its own
// restarts, so TORCHELASTIC_RESTART_COUNT differs between hosts and a job may restart
// max_restarts times per host (pytorch#108158). Under dtrain the supervisor counts: every rank of
// a generation sees the same TORCHELASTIC_RESTART_COUNT, a lost host replaced by a spare uses no
// restart (a membership change, as under torchrun), a crash on any host uses one, and the budget
// is spent by crashes on different hosts together. Real hosts (network namespaces with sshd),
// a real host kill, real SIGKILLs of workers.

#include <doctest/doctest.h>

#include <signal.h>

#include <map>
#include <set>
#include <sstream>

#include "tests/integration/cluster_job.h"

using namespace dtrain::testing;

namespace {

/// Each rank's "gen=G count=C max=M rank=R pid=P" lines, keyed by generation: what it was
/// started with (the pid is the worker's own: the shell execs sleep).
std::map<int, std::string> started_with(ClusterJob& job, int rank) {
  std::map<int, std::string> seen;
  std::istringstream log(job.rank_log(rank));
  std::string line;
  while (std::getline(log, line)) {
    size_t at = line.find("gen=");
    if (at == std::string::npos) continue;
    seen[std::atoi(line.c_str() + at + 4)] = line.substr(at);
  }
  return seen;
}

std::string without_pid(const std::string& line) { return line.substr(0, line.find(" pid=")); }

pid_t pid_in(const std::string& line) {
  size_t at = line.find(" pid=");
  pid_t pid = at == std::string::npos ? 0 : static_cast<pid_t>(std::atoi(line.c_str() + at + 5));
  REQUIRE_MESSAGE(pid > 1, line);
  return pid;
}

/// Waits until every rank of `world` printed its line for generation `gen`.
bool all_started(ClusterJob& job, int gen, int world) {
  return wait_until([&] {
    for (int rank = 0; rank < world; ++rank) {
      if (!started_with(job, rank).count(gen)) return false;
    }
    return true;
  }, 60'000);
}

}  // namespace

TEST_CASE("a host loss and a crash on each of two hosts: one count on every rank, one budget for the job") {
  TestCluster cluster(4);
  DTRAIN_REQUIRE_CLUSTER(cluster);
  ClusterJob job(cluster, "restart-count");
  ClusterSpec spec;
  spec.name = "restart-count";
  spec.spares = {4};
  spec.command = R"([/bin/sh, -c, 'echo "gen=$DTRAIN_GENERATION count=$TORCHELASTIC_RESTART_COUNT max=$TORCHELASTIC_MAX_RESTARTS rank=$RANK pid=$$"; exec sleep 600'])";
  // Generations here make no progress (no steps): crash-loop detection is put out of the way.
  spec.extra = "elastic:\n  max_restarts: 1\n  crash_loop_after: 10\n";
  job.write_spec(spec);
  job.start();
  REQUIRE(job.wait_exec());
  const int world = 6;
  REQUIRE_MESSAGE(all_started(job, 0, world), job.err());

  // The host of ranks 4 and 5 dies: the spare takes them, and no restart is used.
  REQUIRE(cluster.kill(3).status == 0);
  REQUIRE_MESSAGE(all_started(job, 1, world), job.err());
  for (int rank = 0; rank < world; ++rank) {
    CHECK_MESSAGE(without_pid(started_with(job, rank)[1]) == "gen=1 count=0 max=1 rank=" + std::to_string(rank),
                  job.rank_log(rank));
  }

  // Rank 0 (host 1) crashes: the one restart of the budget, the same count on every host.
  REQUIRE(::kill(pid_in(started_with(job, 0)[1]), SIGKILL) == 0);
  REQUIRE_MESSAGE(all_started(job, 2, world), job.err());
  for (int rank = 0; rank < world; ++rank) {
    CHECK_MESSAGE(without_pid(started_with(job, rank)[2]) == "gen=2 count=1 max=1 rank=" + std::to_string(rank),
                  job.rank_log(rank));
  }
  nlohmann::json state = nlohmann::json::parse(read_text(job.run_dir() + "/state.json"));
  CHECK(state["ranks"][4]["host"] == cluster.host(4).name);

  // Rank 2 (host 2, which has not failed before) crashes: under torchrun host 2's agent would
  // still have its own restart; here the job's budget is spent and the run ends.
  REQUIRE(::kill(pid_in(started_with(job, 2)[2]), SIGKILL) == 0);
  REQUIRE(job.wait(60'000));
  CHECK_MESSAGE(job.exit_code() == 1, job.err());
  CHECK_MESSAGE(job.err().find("restart budget spent: elastic.max_restarts=1") != std::string::npos, job.err());
  auto exhausted = job.events("failure.budget_exhausted");
  REQUIRE(exhausted.size() == 1);
  auto started = job.events("recovery.started");
  REQUIRE(started.size() == 2);  // the host loss and the first crash; the second gave up
  CHECK(started[0]["restarts"] == 0);
  CHECK(started[1]["restarts"] == 1);
  CHECK_FALSE(started_with(job, 0).count(3));  // no generation 3 anywhere
  check_nothing_left(cluster, job);
}
