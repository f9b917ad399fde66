// Runtime directories nobody can block, on the namespace cluster (issue 26): another user has
// pre-created /tmp/dtrain-<uid> on two hosts (each host has a private /tmp), so the directory
// the supervisor names in config.runtime_dir is not one the agents there may use. Each agent
// makes a fresh private directory instead (/tmp/dtrain-<uid>-XXXXXX), says so once (agent.error
// naming the refused directory and its owner) and the run goes on: the reference trainer's ranks
// meet through those agents' sockets and train to the end. Nothing is left in either host's /tmp
// but the blocker, untouched, and no process of the run is left anywhere.

#include <doctest/doctest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "tests/integration/cluster_job.h"

using namespace dtrain::testing;

TEST_CASE("another user's /tmp/dtrain-<uid> on two hosts: their agents use a private directory - the run trains") {
  TestCluster cluster(2);
  DTRAIN_REQUIRE_CLUSTER(cluster);
  const std::string uid = std::to_string(::geteuid());
  std::vector<std::string> blockers;
  for (int number : {1, 2}) {
    std::string blocker = cluster.host(number).dir + "/tmp/dtrain-" + uid;  // /tmp/dtrain-<uid> there
    REQUIRE(::mkdir(blocker.c_str(), 0700) == 0);
    REQUIRE(::chown(blocker.c_str(), 65534, 65534) == 0);
    blockers.push_back(blocker);
  }

  ClusterJob job(cluster, "rtdir");
  ClusterSpec spec;
  spec.name = "rtdir";
  spec.hosts = {1, 2};
  spec.command = trainer_command(60);
  spec.extra = "batch: {global: 16, micro: 2}\n";
  job.write_spec(spec);
  REQUIRE(job.run({}, 120'000));
  INFO(job.err());
  CHECK(job.exit_code() == 0);
  std::string expected = final_line(job.rank_log(0));
  CHECK(expected.find("final step=60") != std::string::npos);
  for (int rank = 1; rank < 4; ++rank) CHECK(final_line(job.rank_log(rank)) == expected);

  // Said once per host, naming the refused directory and its owner, and the path used instead.
  auto notes = job.events("agent.error");
  REQUIRE(notes.size() == 2);
  for (int number : {1, 2}) {
    std::string host = cluster.host(number).name;
    int found = 0;
    for (const auto& note : notes) {
      if (note.value("host", "") != host) continue;
      ++found;
      std::string message = note.value("message", "");
      CHECK_MESSAGE(message.find("runtime directory '/tmp/dtrain-" + uid + "' belongs to uid 65534") != std::string::npos,
                    message);
      CHECK_MESSAGE(message.find("this run's worker socket is in '/tmp/dtrain-" + uid + "-") != std::string::npos, message);
    }
    CHECK_MESSAGE(found == 1, host);
  }
  for (const std::string& blocker : blockers) {
    struct stat info {};
    REQUIRE(::stat(blocker.c_str(), &info) == 0);
    CHECK(info.st_uid == 65534);             // theirs, left as it was
    CHECK(std::filesystem::is_empty(blocker));  // nothing of ours went into it
    for (const auto& entry : std::filesystem::directory_iterator(blocker.substr(0, blocker.rfind('/')))) {
      std::string name = entry.path().filename();
      CHECK_MESSAGE(name.rfind("dtrain-" + uid + "-", 0) != 0, "fallback directory left: " << name);
    }
  }
  check_nothing_left(cluster, job);
}
