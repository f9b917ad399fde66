// In-place recovery in the worker runtime (worker.h: generation_change, adopt_new_generation):
// gen.changed from the agent is noticed by the reader thread, and a store request waiting then is
// abandoned; adopting it resets what is per generation (the beat rate limit, a held beat,
// comm.ready); gen.check refuses a commit while the worker has not adopted the generation the
// agent already stamps it with; and in process, a rank whose peer died connects again under the
// new generation's store with the same keys.

#include <doctest/doctest.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/unit/fd_lines.h"
#include "tests/unit/temp_dir.h"
#include "worker/runtime/worker.h"

using namespace std::chrono_literals;
namespace worker = dtrain::worker;
using nlohmann::json;

using dtrain::testing::read_line;
using dtrain::testing::write_all;

namespace {

std::vector<std::string> types_of(const std::vector<std::string>& lines) {
  std::vector<std::string> types;
  for (const std::string& line : lines) {
    json parsed = json::parse(line, nullptr, false);
    types.push_back(parsed.is_object() && parsed.contains("type") ? parsed["type"].get<std::string>() : "?");
  }
  return types;
}

/// Sets environment variables for one scope.
struct ScopedEnv {
  std::vector<std::string> names;
  void set(const std::string& name, const std::string& value) {
    ::setenv(name.c_str(), value.c_str(), 1);
    names.push_back(name);
  }
  ~ScopedEnv() {
    for (const std::string& name : names) ::unsetenv(name.c_str());
  }
};

/// In-process Gloo workers of a data-parallel world of `size`, in generation 0 of `store`.
std::vector<std::unique_ptr<worker::Worker>> data_parallel_workers(int size, std::shared_ptr<worker::InProcessKv> store) {
  worker::Settings settings;
  settings.backend = "gloo";
  settings.in_place = true;
  std::vector<std::unique_ptr<worker::Worker>> workers;
  for (int rank = 0; rank < size; ++rank) {
    worker::Topology topology;
    topology.world_size = topology.dp_size = size;
    topology.rank = topology.dp_rank = rank;
    workers.push_back(worker::Worker::in_process(topology, settings, store));
  }
  return workers;
}

}  // namespace

TEST_CASE("worker runtime: gen.changed from the agent is adopted, and gen.check refuses a commit until it is") {
  dtrain::testing::TempDir temp;
  std::string path = temp.path + "/agent.sock";

  // The agent of the contract: while the worker waits for a key, it announces generation 3
  // (the supervisor moved the store from 2 to 3), and from then on the store's generation is 3.
  std::vector<std::string> received;
  auto script = [&](int connection) {
    for (std::string line; !(line = read_line(connection)).empty();) {
      received.push_back(line);
      json request = json::parse(line, nullptr, false);
      std::string type = request.is_object() ? request.value("type", "") : "";
      if (type == "kv.wait") {  // never answered: the store moves on meanwhile
        write_all(connection, json{{"type", "gen.changed"}, {"gen", 3}}.dump() + "\n");
      } else if (type == "gen.check") {
        write_all(connection,
                  json{{"type", "gen.ok"}, {"id", request["id"]}, {"current", true}, {"generation", 3}}.dump() + "\n");
      } else if (type == "kv.get") {
        write_all(connection, json{{"type", "kv.value"}, {"id", request["id"]}, {"value", "g3"}}.dump() + "\n");
      }
    }
  };
  {
    ScopedEnv env;
    env.set("DTRAIN_AGENT_SOCKET", path);
    env.set("DTRAIN_GENERATION", "2");
    env.set("DTRAIN_IN_PLACE", "1");
    env.set("DTRAIN_IN_PLACE_TIMEOUT_MS", "20000");
    env.set("DTRAIN_HEARTBEAT_INTERVAL_MS", "600000");  // every beat after the first is held
    dtrain::testing::ScriptedAgent agent(path, script);
    auto created = worker::Worker::from_env();
    REQUIRE_MESSAGE(created.ok(), (created.ok() ? "" : created.error().message));
    worker::Worker& w = **created;
    CHECK(w.settings().in_place);
    CHECK_FALSE(w.settings().join_live);
    CHECK(w.settings().in_place_timeout_ms == 20000);
    CHECK(w.settings().generation == 2);

    auto first = w.connect(5s);
    REQUIRE(first.ok());
    auto again = w.connect(5s);  // a second connect in the same generation: no second comm.ready
    REQUIRE(again.ok());
    w.beat(1, {});  // sent: the first beat
    w.beat(2, {});  // held by the rate limit
    // A checkpoint's handshake waits for shards when the generation changes: it is abandoned
    // at once (the agent would serve it in generation 3's store, where the keys never come).
    auto shards = w.kv().wait({"ckpt/step-5/tp0-pp0"}, 600s);
    REQUIRE_FALSE(shards.ok());
    CHECK(shards.error().message ==
          "kv.wait: abandoned: the dtrain agent announced generation 3 (gen.changed) while it waited");
    CHECK(w.generation_change() == std::optional<int>(3));
    // The agent already stamps this worker with 3; a checkpoint begun in 2 must not commit.
    auto current = w.kv().generation_is_current();
    REQUIRE(current.ok());
    CHECK_FALSE(*current);
    auto stale = w.kv().get("k");  // refused here, never sent: it would read generation 3's store
    REQUIRE_FALSE(stale.ok());
    CHECK(stale.error().message ==
          "kv.get 'k': the store moved on to generation 3 (gen.changed) and this worker is still in generation 2");

    auto adopted = w.adopt_new_generation(20s);
    REQUIRE_MESSAGE(adopted.ok(), (adopted.ok() ? "" : adopted.error().message));
    CHECK(*adopted == 3);
    CHECK(w.settings().generation == 3);
    CHECK_FALSE(w.generation_change().has_value());
    current = w.kv().generation_is_current();
    REQUIRE(current.ok());
    CHECK(*current);

    auto rejoined = w.connect(5s);  // comm.ready again: it is generation 3's
    REQUIRE(rejoined.ok());
    auto fresh = w.kv().get("k");
    REQUIRE(fresh.ok());
    CHECK(*fresh == std::optional<std::string>("g3"));
    w.beat(3, {});  // the first beat of generation 3 goes out at once
    w.bye("finished");
  }
  std::vector<std::string> types = types_of(received);
  CHECK(types == std::vector<std::string>{"hello", "comm.ready", "beat", "kv.wait", "gen.check", "gen.check",
                                          "comm.ready", "kv.get", "beat", "bye"});
  // The beat held in generation 2 (step 2) is dropped: sent under 3 it would read as progress.
  CHECK(json::parse(received.at(2))["step"] == 1);
  CHECK(json::parse(received.at(8))["step"] == 3);
}

TEST_CASE("worker runtime: without an announcement adopt_new_generation is an error, not a hang") {
  worker::Settings settings;
  settings.generation = 4;
  auto w = worker::Worker::in_process({}, settings, std::make_shared<worker::InProcessKv>());
  CHECK_FALSE(w->generation_change().has_value());
  auto adopted = w->adopt_new_generation(10ms);
  REQUIRE_FALSE(adopted.ok());
  CHECK(adopted.error().message == "no new generation (after 4) announced within 10ms");
  w->announce_generation(4, nullptr);  // not newer: nothing to adopt
  CHECK_FALSE(w->generation_change().has_value());
}

TEST_CASE("worker runtime: a survivor whose peer died connects again under the new generation's store") {
  auto old_store = std::make_shared<worker::InProcessKv>();
  std::vector<std::unique_ptr<worker::Worker>> workers = data_parallel_workers(2, old_store);
  worker::Topology topology = workers[0]->topology();
  worker::Settings settings = workers[0]->settings();
  std::vector<std::unique_ptr<worker::Communicator>> comms(2);
  std::vector<std::string> errors(2);
  std::vector<double> sums(2);
  auto connect_and_sum = [&](int rank) {
    auto comm = workers[static_cast<size_t>(rank)]->connect(20s);
    if (!comm) {
      errors[static_cast<size_t>(rank)] = comm.error().message;
      return;
    }
    double value = rank + 1;
    if (auto summed = (*comm)->allreduce_sum(&value, 1, 20s); !summed) errors[static_cast<size_t>(rank)] = summed.error().message;
    sums[static_cast<size_t>(rank)] = value;
    comms[static_cast<size_t>(rank)] = std::move(*comm);
  };
  // Both ranks connect and sum 1 + 2, each in its own thread.
  auto both_connect_and_sum = [&] {
    std::thread one(connect_and_sum, 1);
    connect_and_sum(0);
    one.join();
    REQUIRE_MESSAGE(errors[0].empty(), errors[0]);
    REQUIRE_MESSAGE(errors[1].empty(), errors[1]);
    CHECK(sums == std::vector<double>{3, 3});
  };
  both_connect_and_sum();  // generation 0

  // Rank 1 dies: its sockets close, and rank 0's next collective fails at once (no timeout).
  comms[1].reset();
  workers[1].reset();
  double value = 1;
  auto failed = comms[0]->allreduce_sum(&value, 1, 600s);
  REQUIRE_FALSE(failed.ok());
  comms[0].reset();

  // The supervisor moves the store to generation 1 and starts a replacement in it.
  auto new_store = std::make_shared<worker::InProcessKv>();
  old_store->end_generation();
  workers[0]->announce_generation(1, new_store);
  CHECK(workers[0]->generation_change() == std::optional<int>(1));
  worker::Settings replacement_settings = settings;
  replacement_settings.generation = 1;
  replacement_settings.join_live = true;
  worker::Topology replacement = topology;
  replacement.rank = replacement.dp_rank = 1;
  workers[1] = worker::Worker::in_process(replacement, replacement_settings, new_store);

  auto adopted = workers[0]->adopt_new_generation(20s);
  REQUIRE(adopted.ok());
  CHECK(workers[0]->settings().generation == 1);
  CHECK(&workers[0]->kv() == new_store.get());
  both_connect_and_sum();  // generation 1: the same store keys, in the new store
  std::vector<std::string> types = types_of(workers[0]->sent_lines());
  CHECK(std::count(types.begin(), types.end(), "comm.ready") == 2);  // once in each generation
}

TEST_CASE("worker runtime: an announced generation ends a collective that waits for a live but absent peer") {
  // The survivor that used to miss the in-place deadline: blocked in an all-reduce with peers
  // that are alive but will never take part (they wait for a dead rank elsewhere), with a
  // timeout far beyond the deadline. The announcement must end the wait, and say so.
  std::vector<std::unique_ptr<worker::Worker>> workers = data_parallel_workers(3, std::make_shared<worker::InProcessKv>());
  std::vector<std::unique_ptr<worker::Communicator>> comms(3);
  std::vector<std::string> errors(3);
  {
    std::vector<std::thread> connecting;
    for (int rank = 0; rank < 3; ++rank) {
      connecting.emplace_back([&, rank] {
        auto comm = workers[static_cast<size_t>(rank)]->connect(20s);
        if (comm) comms[static_cast<size_t>(rank)] = std::move(*comm);
        else errors[static_cast<size_t>(rank)] = comm.error().message;
      });
    }
    for (auto& thread : connecting) thread.join();
  }
  for (const std::string& error : errors) REQUIRE_MESSAGE(error.empty(), error);

  // Ranks 0 and 1 reduce; rank 2 never comes (its communicator stays open).
  std::vector<std::string> outcomes(2);
  std::atomic<int> finished{0};
  std::vector<std::thread> reducing;
  for (int rank = 0; rank < 2; ++rank) {
    reducing.emplace_back([&, rank] {
      std::vector<double> values(1 << 16, 1.0);
      auto reduced = comms[static_cast<size_t>(rank)]->allreduce_sum(values.data(), values.size(), 600s);
      outcomes[static_cast<size_t>(rank)] = reduced.ok() ? "ok" : reduced.error().message;
      finished += 1;
    });
  }
  // Usually they are waiting in Gloo by now; if not, the announcement is seen at the start of
  // the collective instead: the same outcome either way.
  std::this_thread::sleep_for(200ms);
  CHECK(finished == 0);
  workers[0]->announce_generation(1, std::make_shared<worker::InProcessKv>());
  workers[1]->announce_generation(1, std::make_shared<worker::InProcessKv>());
  auto deadline = std::chrono::steady_clock::now() + 60s;  // far below the 600 s op timeout
  while (finished < 2 && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(5ms);
  REQUIRE_MESSAGE(finished == 2, "the announcement did not end the all-reduce");
  for (auto& thread : reducing) thread.join();
  for (int rank = 0; rank < 2; ++rank) {
    const std::string& outcome = outcomes[static_cast<size_t>(rank)];
    INFO(outcome);
    CHECK(outcome.find("gloo allreduce(float64 x 65536) on rank " + std::to_string(rank) + " abandoned: generation 1 was announced") == 0);
    CHECK(outcome.find("peer rank") == std::string::npos);  // no peer is blamed for it
  }
  // The communicator stays unusable: a later collective says why at once.
  double value = 1;
  auto later = comms[0]->allreduce_sum(&value, 1, 600s);
  REQUIRE_FALSE(later.ok());
  CHECK(later.error().message.find("abandoned: generation 1 was announced") != std::string::npos);

  // Rank 2, which heard nothing, finds its peers gone at its next collective instead of
  // waiting out its timeout, once they have left (destroyed their communicators).
  comms[0].reset();
  comms[1].reset();
  auto orphan = comms[2]->allreduce_sum(&value, 1, 600s);
  REQUIRE_FALSE(orphan.ok());
  CHECK(orphan.error().message.find("abandoned") == std::string::npos);
  for (auto& comm : comms) comm.reset();
}
