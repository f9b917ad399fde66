// Peer failures must end a collective with an error naming the operation, never a hang.
#include <doctest/doctest.h>

#include <signal.h>
#include <sys/wait.h>

#include "tests/integration/fake_agent.h"

using dtrain::testing::FakeAgent;
using dtrain::testing::ReceivedMessage;
using namespace std::chrono_literals;

namespace {

const std::string kTrainer = DTRAIN_BINARY_DIR "/cli/dtrain-train";

bool reached_step(const std::vector<ReceivedMessage>& messages, int rank, int step) {
  for (const ReceivedMessage& message : messages) {
    if (message.rank == rank && message.msg.value("type", "") == "beat" && message.msg.value("step", 0) >= step) {
      return true;
    }
  }
  return false;
}

/// Starts 3 trainers with a long comm timeout (the survivors of a death must notice it
/// themselves, not time out) and waits until ranks 0 and 1 beat step `step`.
void start_three_trainers(FakeAgent& agent, std::vector<std::string> model, const std::string& global_batch,
                          int step) {
  std::vector<std::string> command = {kTrainer, "--steps", "100000000", "--log-every", "0", "--comm-timeout-ms", "120000"};
  command.insert(command.end(), model.begin(), model.end());
  agent.spawn(3, command,
              {{"DTRAIN_HEARTBEAT_INTERVAL_MS", "0"}, {"DTRAIN_GLOBAL_BATCH", global_batch}, {"DTRAIN_MICRO_BATCH", "1"}});
  REQUIRE(agent.wait_for([step](const auto& m) { return reached_step(m, 0, step) && reached_step(m, 1, step); }, 120s));
}

/// Kills rank 2 of 3 and checks that ranks 0 and 1 exit 1 within 60 s (their comm timeout is
/// longer: they must notice the death itself), failing an all-reduce that names a peer.
void kill_rank_2_and_check_survivors(FakeAgent& agent) {
  ::kill(agent.pid(2), SIGKILL);
  int64_t killed_at = dtrain::testing::steady_ms();
  for (int rank : {0, 1}) {
    auto status = agent.wait_exit(rank, 60s);
    REQUIRE_MESSAGE(status.has_value(), "rank " << rank << " still waits, 60 s after its peer died:\n" << agent.log(rank));
    CHECK(WIFEXITED(*status));
    CHECK(WEXITSTATUS(*status) == 1);
    std::string log = agent.log(rank);
    INFO("rank " << rank << " log:\n" << log);
    CHECK(log.find("gloo allreduce(float64") != std::string::npos);
    CHECK(log.find("failed on rank " + std::to_string(rank) + " of 3") != std::string::npos);
    CHECK(log.find("peer rank") != std::string::npos);
    CHECK(log.find("no progress within") == std::string::npos);
  }
  MESSAGE("survivors exited " << dtrain::testing::steady_ms() - killed_at << " ms after the SIGKILL");
}

/// The first survivor to notice names the dead rank (the other may instead see that survivor
/// exit, and name it). Under load both can fail on a read whose socket no longer tells which
/// pair it was: then the message lists the peers it could be ("peer ranks 1,2"), and rank 2
/// must be among them.
bool names_rank_2(const std::string& log) {
  if (log.find("peer rank 2 is gone") != std::string::npos) return true;
  size_t list = log.find("peer ranks ");
  if (list == std::string::npos) return false;
  std::string ranks = log.substr(list + 11, log.find(':', list) - list - 11);
  return ("," + ranks + ",").find(",2,") != std::string::npos;
}

}  // namespace

TEST_CASE("trainer: SIGKILL of one rank makes the others fail fast, naming the operation and the peer") {
  FakeAgent agent;
  start_three_trainers(agent, {}, "6", 20);
  kill_rank_2_and_check_survivors(agent);
  INFO("rank 0 log:\n" << agent.log(0) << "\nrank 1 log:\n" << agent.log(1));
  CHECK((names_rank_2(agent.log(0)) || names_rank_2(agent.log(1))));
}

TEST_CASE("trainer: a rank killed while its large message is half received does not leave the receiver waiting") {
  // 3 ranks, 8M float64 parameters: each ring step moves ~21 MB, so at the SIGKILL a survivor
  // is often reading the dead rank's message (most runs on an idle machine; fewer under load,
  // when Gloo's own error comes first). Gloo closes the connection but does not end a wait on a
  // message that had begun to arrive; the peer watch (gloo_peer_watch.h) does.
  FakeAgent agent;
  start_three_trainers(agent, {"--inputs", "2048", "--hidden", "2048", "--layers", "2"}, "3", 3);
  kill_rank_2_and_check_survivors(agent);
  INFO("rank 0 log:\n" << agent.log(0) << "\nrank 1 log:\n" << agent.log(1));
  CHECK((names_rank_2(agent.log(0)) || names_rank_2(agent.log(1))));
}

TEST_CASE("trainer: a SIGSTOPped rank makes the others fail with a timeout error, not hang") {
  FakeAgent agent;
  agent.spawn(2, {kTrainer, "--steps", "100000000", "--log-every", "0", "--comm-timeout-ms", "1500"},
              {{"DTRAIN_HEARTBEAT_INTERVAL_MS", "0"}, {"DTRAIN_GLOBAL_BATCH", "4"}, {"DTRAIN_MICRO_BATCH", "1"}});
  REQUIRE(agent.wait_for([](const auto& m) { return reached_step(m, 1, 20); }, 60s));
  ::kill(agent.pid(1), SIGSTOP);
  auto status = agent.wait_exit(0, 60s);
  REQUIRE_MESSAGE(status.has_value(), "rank 0 hung on a stopped peer:\n" << agent.log(0));
  CHECK(WEXITSTATUS(*status) == 1);
  std::string log = agent.log(0);
  INFO(log);
  CHECK(log.find("gloo allreduce(float64") != std::string::npos);
  CHECK(log.find("no progress within the 1500ms timeout") != std::string::npos);
  CHECK(log.find("peer ranks 1") != std::string::npos);
}
