// "Communicator up": every rank of dtrain-train says comm.ready exactly once, after hello and
// before its first beat, and the first step's beat still goes out at once (comm.ready is not a
// beat and must not use up the rate limiter's first slot). Real processes, real Gloo.
#include <doctest/doctest.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "tests/integration/fake_agent.h"

using dtrain::testing::FakeAgent;
using namespace std::chrono_literals;

namespace {

const std::string kTrainer = DTRAIN_BINARY_DIR "/cli/dtrain-train";

void check_comm_ready(int world) {
  FakeAgent agent;
  // A minute between beats: only the first and the final beat may be sent.
  agent.spawn(world, {kTrainer, "--steps", "20"}, {{"DTRAIN_HEARTBEAT_INTERVAL_MS", "60000"}});
  REQUIRE_MESSAGE(agent.wait_all_ok(120s), agent.log(0) << agent.log(world - 1));
  std::map<int, std::vector<dtrain::testing::ReceivedMessage>> by_rank;
  for (const auto& message : agent.received()) by_rank[message.rank].push_back(message);
  REQUIRE(by_rank.size() == static_cast<size_t>(world));
  for (auto& [rank, messages] : by_rank) {
    CAPTURE(rank);
    std::vector<std::string> types;
    for (const auto& message : messages) types.push_back(message.msg["type"]);
    CAPTURE(types);
    REQUIRE(types.size() >= 4);
    CHECK(types[0] == "hello");
    CHECK(types[1] == "comm.ready");
    CHECK(std::count(types.begin(), types.end(), "comm.ready") == 1);
    CHECK(messages[1].msg["ms"].is_number_integer());
    CHECK(messages[1].msg["ms"].get<int64_t>() >= 0);
    REQUIRE(types[2] == "beat");
    CHECK(messages[2].msg["step"] == 1);  // the first step's beat, not swallowed
    CHECK(std::count(types.begin(), types.end(), "beat") == 2);
    CHECK(types.back() == "bye");
  }
}

}  // namespace

TEST_CASE("trainer: 2 Gloo ranks each say comm.ready once, between hello and the first step's beat") {
  check_comm_ready(2);
}

TEST_CASE("trainer: a world of one says comm.ready too (the supervisor waits for every rank)") {
  check_comm_ready(1);
}
