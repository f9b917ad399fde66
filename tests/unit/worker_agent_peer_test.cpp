// Workers check who listens on DTRAIN_AGENT_SOCKET before they say hello: a listener of another
// uid (someone who planted a socket where the agent's should be) gets no byte, and the worker
// fails with the socket path and both uids. Both clients: the C++ runtime (Worker::from_env) and
// worker/python/dtrain_worker.py. The listener is a real child process that drops to uid 65534.

#include <doctest/doctest.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "tests/skip.h"
#include "tests/unit/temp_dir.h"
#include "worker/runtime/worker.h"

namespace {

constexpr uid_t kNobody = 65534;
constexpr int kReportTimeoutMs = 30'000;  // a bound for a broken test, never a measurement

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// A child process listening on `path` as `uid`. The socket is bound here (the child may not be
// able to write the directory) and the child calls listen() after dropping to `uid`: the kernel
// records the listener's credentials at listen(), and that is what SO_PEERCRED reports to a
// client. The child accepts one connection and writes what arrived on it, until the client
// closed it, to a pipe.
class Listener {
 public:
  Listener(const std::string& path, uid_t uid) {
    int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    REQUIRE(fd >= 0);
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    path.copy(address.sun_path, sizeof address.sun_path - 1);
    REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0);
    int report[2];
    REQUIRE(::pipe2(report, O_CLOEXEC) == 0);
    pid_ = ::fork();
    REQUIRE(pid_ >= 0);
    if (pid_ == 0) {
      ::close(report[0]);
      if (uid != ::geteuid() && (::setgroups(0, nullptr) != 0 || ::setgid(uid) != 0 || ::setuid(uid) != 0)) {
        ::_exit(2);
      }
      if (::listen(fd, 4) != 0 || ::write(report[1], "R", 1) != 1) ::_exit(3);
      int connection = ::accept(fd, nullptr, nullptr);
      if (connection < 0) ::_exit(4);
      std::string received;
      char buffer[4096];
      for (ssize_t n; (n = ::read(connection, buffer, sizeof buffer)) > 0;) received.append(buffer, n);
      if (::write(report[1], received.data(), received.size()) < 0) ::_exit(5);
      ::_exit(0);
    }
    ::close(fd);
    ::close(report[1]);
    report_fd_ = report[0];
    std::string ready = read_report(1);
    REQUIRE_MESSAGE(ready == "R", "the listener did not start (uid " << uid << ")");
  }

  ~Listener() {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    ::close(report_fd_);
  }

  /// Everything the client sent, once it has closed its end.
  std::string received() { return read_report(SIZE_MAX); }

 private:
  std::string read_report(size_t limit) {
    std::string out;
    while (out.size() < limit) {
      pollfd readable{report_fd_, POLLIN, 0};
      REQUIRE_MESSAGE(::poll(&readable, 1, kReportTimeoutMs) == 1, "no report from the listener");
      char buffer[4096];
      ssize_t n = ::read(report_fd_, buffer, std::min(sizeof buffer, limit - out.size()));
      if (n <= 0) break;
      out.append(buffer, static_cast<size_t>(n));
    }
    return out;
  }

  pid_t pid_ = -1;
  int report_fd_ = -1;
};

struct CommandResult {
  int status = -1;
  std::string output;
};

CommandResult run_python_worker(const std::string& socket_path) {
  std::string command = "DTRAIN_AGENT_SOCKET='" + socket_path +
                        "' /usr/bin/python3 -c 'import sys; sys.path.insert(0, \"" DTRAIN_SOURCE_DIR
                        "/worker/python\"); import dtrain_worker; dtrain_worker.Worker.from_env()' 2>&1";
  CommandResult result;
  FILE* pipe = ::popen(command.c_str(), "r");
  REQUIRE(pipe != nullptr);
  char buffer[4096];
  for (size_t n; (n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0;) result.output.append(buffer, n);
  result.status = ::pclose(pipe);
  return result;
}

void require_root() {
  if (::geteuid() != 0) dtrain::testing::skip_test("needs root to run a listener as uid 65534");
}

void require_python() {
  if (::access("/usr/bin/python3", X_OK) != 0) dtrain::testing::skip_test("no /usr/bin/python3");
}

}  // namespace

TEST_CASE("C++ worker: a listener of another uid gets no hello and the error names both uids") {
  require_root();
  dtrain::testing::TempDir temp;
  std::string path = temp.path + "/agent.sock";
  Listener listener(path, kNobody);
  ::setenv("DTRAIN_AGENT_SOCKET", path.c_str(), 1);
  auto worker = dtrain::worker::Worker::from_env();
  REQUIRE_FALSE(worker.ok());
  const std::string& message = worker.error().message;
  CHECK(contains(message, "DTRAIN_AGENT_SOCKET='" + path + "'"));
  CHECK(contains(message, "runs as uid 65534, not as this worker's uid " + std::to_string(::geteuid())));
  CHECK(contains(message, "nothing was sent"));
  CHECK(listener.received().empty());
}

TEST_CASE("C++ worker: a listener of our own uid gets the hello (the check lets the agent through)") {
  dtrain::testing::TempDir temp;
  std::string path = temp.path + "/agent.sock";
  Listener listener(path, ::geteuid());
  ::setenv("DTRAIN_AGENT_SOCKET", path.c_str(), 1);
  {
    auto worker = dtrain::worker::Worker::from_env();
    REQUIRE_MESSAGE(worker.ok(), (worker.ok() ? "" : worker.error().message));
  }
  CHECK(contains(listener.received(), "\"type\":\"hello\""));
}

TEST_CASE("python worker: a listener of another uid gets no hello and the error names both uids") {
  require_root();
  require_python();
  dtrain::testing::TempDir temp;
  std::string path = temp.path + "/agent.sock";
  Listener listener(path, kNobody);
  CommandResult result = run_python_worker(path);
  CHECK(result.status != 0);
  CHECK_MESSAGE(contains(result.output, "DtrainError: DTRAIN_AGENT_SOCKET='" + path + "'"), result.output);
  CHECK_MESSAGE(contains(result.output, "runs as uid 65534, not as this worker's uid " + std::to_string(::geteuid())),
                result.output);
  CHECK(listener.received().empty());
}

TEST_CASE("python worker: a listener of our own uid gets the hello") {
  require_python();
  dtrain::testing::TempDir temp;
  std::string path = temp.path + "/agent.sock";
  Listener listener(path, ::geteuid());
  CommandResult result = run_python_worker(path);
  CHECK_MESSAGE(result.status == 0, result.output);
  CHECK(contains(listener.received(), "hello"));
}
