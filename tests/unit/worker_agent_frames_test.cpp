// What the agent sends a worker is read by the worker runtime's reader thread, where an exception
// would end the worker (std::terminate). Frames the runtime does not expect — a "type" that is not
// a string, a non-object, invalid JSON, an id of the wrong type, a ckpt.request with a wrong step —
// must be ignored, and the next good reply must still reach the request that waits for it.

#include <doctest/doctest.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "tests/unit/fd_lines.h"
#include "tests/unit/temp_dir.h"
#include "worker/runtime/worker.h"

using dtrain::testing::read_line;
using dtrain::testing::write_all;

TEST_CASE("worker runtime: frames from the agent of the wrong shape are ignored, the next good reply still arrives") {
  dtrain::testing::TempDir temp;
  std::string path = temp.path + "/agent.sock";

  std::string hello, request;
  auto script = [&](int connection) {
    hello = read_line(connection);
    // Unexpected frames first, each of which once could have thrown on the reader thread.
    write_all(connection,
              "{\"type\":5}\n"
              "{\"type\":null,\"id\":987654321}\n"
              "{\"type\":[\"kv.value\"]}\n"
              "[1,2,3]\n"
              "not json at all\n"
              "{\"type\":\"ckpt.request\",\"step\":\"soon\",\"reason\":7}\n"
              "{\"type\":\"kv.value\",\"id\":\"1\",\"value\":\"wrong id type\"}\n");
    request = read_line(connection);
    nlohmann::json parsed = nlohmann::json::parse(request, nullptr, false);
    int64_t id = parsed.is_object() && parsed.contains("id") && parsed["id"].is_number_integer()
                     ? parsed["id"].get<int64_t>()
                     : -1;
    write_all(connection, nlohmann::json{{"type", "kv.value"}, {"id", id}, {"value", "v1"}}.dump() + "\n");
    read_line(connection);  // until the worker goes away
  };

  {
    // Whatever happens below (a failed REQUIRE throws), the agent's thread is ended and joined.
    dtrain::testing::ScriptedAgent agent(path, script);
    dtrain::testing::AgentSocketEnv socket_env(path);
    auto worker = dtrain::worker::Worker::from_env();
    REQUIRE_MESSAGE(worker.ok(), (worker.ok() ? "" : worker.error().message));
    auto value = (*worker)->kv().get("key");
    REQUIRE_MESSAGE(value.ok(), (value.ok() ? "" : value.error().message));
    CHECK(*value == std::optional<std::string>("v1"));
  }
  CHECK(hello.find("\"type\":\"hello\"") != std::string::npos);
  CHECK(request.find("\"type\":\"kv.get\"") != std::string::npos);
}
