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

#include "tests/unit/temp_dir.h"
#include "worker/runtime/worker.h"

namespace {

/// Reads one newline-terminated line from `fd` (empty at EOF).
std::string read_line(int fd) {
  std::string line;
  char c;
  while (::read(fd, &c, 1) == 1 && c != '\n') line += c;
  return line;
}

void write_all(int fd, const std::string& text) {
  size_t done = 0;
  while (done < text.size()) {
    ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n <= 0) return;
    done += static_cast<size_t>(n);
  }
}

}  // namespace

TEST_CASE("worker runtime: frames from the agent of the wrong shape are ignored, the next good reply still arrives") {
  dtrain::testing::TempDir temp;
  std::string path = temp.path + "/agent.sock";
  int listener = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  REQUIRE(listener >= 0);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  path.copy(address.sun_path, sizeof address.sun_path - 1);
  REQUIRE(::bind(listener, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0);
  REQUIRE(::listen(listener, 1) == 0);

  std::string hello, request;
  std::atomic<int> accepted{-1};
  std::thread agent([&] {
    int connection = ::accept(listener, nullptr, nullptr);
    if (connection < 0) return;
    accepted = connection;
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
    accepted = -1;
    ::close(connection);
  });

  // Whatever happens below (a failed REQUIRE throws), the scripted agent's blocking accept or
  // read is ended and its thread joined: no hang, no std::terminate from a joinable thread.
  struct StopAgent {
    int listener;
    std::atomic<int>& accepted;
    std::thread& agent;
    ~StopAgent() {
      ::shutdown(listener, SHUT_RDWR);
      if (int connection = accepted.load(); connection >= 0) ::shutdown(connection, SHUT_RDWR);
      agent.join();
      ::close(listener);
      ::unsetenv("DTRAIN_AGENT_SOCKET");
    }
  };
  ::setenv("DTRAIN_AGENT_SOCKET", path.c_str(), 1);
  {
    StopAgent stop{listener, accepted, agent};
    auto worker = dtrain::worker::Worker::from_env();
    REQUIRE_MESSAGE(worker.ok(), (worker.ok() ? "" : worker.error().message));
    auto value = (*worker)->kv().get("key");
    REQUIRE_MESSAGE(value.ok(), (value.ok() ? "" : value.error().message));
    CHECK(*value == std::optional<std::string>("v1"));
  }
  CHECK(hello.find("\"type\":\"hello\"") != std::string::npos);
  CHECK(request.find("\"type\":\"kv.get\"") != std::string::npos);
}
