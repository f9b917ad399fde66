#pragma once
// Newline-delimited lines over a raw fd, and a scripted agent on a unix socket, for unit tests
// that play the agent's end of the worker ⇄ agent socket (worker/contract/wire.h).

#include <doctest/doctest.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <functional>
#include <string>
#include <thread>

namespace dtrain::testing {

/// Reads one newline-terminated line from `fd` (without the newline; empty at EOF).
inline std::string read_line(int fd) {
  std::string line;
  char c;
  while (::read(fd, &c, 1) == 1 && c != '\n') line += c;
  return line;
}

/// Writes all of `text` (stops early only if the peer is gone).
inline void write_all(int fd, const std::string& text) {
  size_t done = 0;
  while (done < text.size()) {
    ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n <= 0) return;
    done += static_cast<size_t>(n);
  }
}

/// The agent's end of a worker socket at `path`: `script(connection)` runs on its own thread
/// with the first connection. The destructor ends a blocking accept or read (shutdown) and joins
/// the thread, so a test that fails a REQUIRE meanwhile neither hangs nor terminates.
class ScriptedAgent {
 public:
  ScriptedAgent(const std::string& path, std::function<void(int connection)> script) {
    listener_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    REQUIRE(listener_ >= 0);
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    path.copy(address.sun_path, sizeof address.sun_path - 1);
    REQUIRE(::bind(listener_, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0);
    REQUIRE(::listen(listener_, 1) == 0);
    thread_ = std::thread([this, script = std::move(script)] {
      int connection = ::accept(listener_, nullptr, nullptr);
      if (connection < 0) return;
      accepted_ = connection;
      script(connection);
    });
  }
  ~ScriptedAgent() {
    ::shutdown(listener_, SHUT_RDWR);
    if (int connection = accepted_.load(); connection >= 0) ::shutdown(connection, SHUT_RDWR);
    thread_.join();
    if (int connection = accepted_.load(); connection >= 0) ::close(connection);
    ::close(listener_);
  }
  ScriptedAgent(const ScriptedAgent&) = delete;
  ScriptedAgent& operator=(const ScriptedAgent&) = delete;

 private:
  int listener_ = -1;
  std::atomic<int> accepted_{-1};
  std::thread thread_;
};

/// Points DTRAIN_AGENT_SOCKET (what Worker::from_env connects to) at `path` while it lives.
struct AgentSocketEnv {
  explicit AgentSocketEnv(const std::string& path) { ::setenv("DTRAIN_AGENT_SOCKET", path.c_str(), 1); }
  ~AgentSocketEnv() { ::unsetenv("DTRAIN_AGENT_SOCKET"); }
  AgentSocketEnv(const AgentSocketEnv&) = delete;
  AgentSocketEnv& operator=(const AgentSocketEnv&) = delete;
};

}  // namespace dtrain::testing
