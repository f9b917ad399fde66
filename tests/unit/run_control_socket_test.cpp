// The supervisor's control socket keeps its clients bounded (issue 26): past the cap a new
// connection reads a one-line error and is closed, and a client that sends no complete request
// within the idle timeout is closed. Real unix sockets in a temporary directory; the clock is a
// number passed to pump(), so the 30 s timeout is tested with a short one and no waiting.
#include <doctest/doctest.h>

#include <poll.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "launcher/base/fd.h"
#include "launcher/run/control_socket.h"

using dtrain::ControlReply;
using dtrain::ControlRequest;
using dtrain::ControlRequestType;
using dtrain::UniqueFd;
using dtrain::run::ControlSocket;
using dtrain::run::ControlSocketLimits;

namespace {

struct SocketDir {
  std::string path;
  SocketDir() {
    char pattern[] = "/tmp/dtrain-ctl-test-XXXXXX";
    path = ::mkdtemp(pattern);
  }
  ~SocketDir() { std::filesystem::remove_all(path); }
};

UniqueFd connect_to(const std::string& path) {
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::strncpy(address.sun_path, path.c_str(), sizeof address.sun_path - 1);
  REQUIRE(::connect(fd.get(), reinterpret_cast<sockaddr*>(&address), sizeof address) == 0);
  return fd;
}

/// What the supervisor sent before closing, or nullopt while the connection is still open
/// (nothing to read within `wait_ms`).
std::optional<std::string> closed_with(int fd, int wait_ms = 0) {
  std::string text;
  for (;;) {
    pollfd entry{fd, POLLIN, 0};
    if (::poll(&entry, 1, wait_ms) <= 0) return std::nullopt;
    char buffer[4096];
    ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n <= 0) return text;
    text.append(buffer, static_cast<size_t>(n));
  }
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

ControlSocket::Handler answer_status(int& answered) {
  return [&answered](const ControlRequest& request) {
    ++answered;
    CHECK(request.type == ControlRequestType::status);
    return ControlReply{true, "running", 0, ""};
  };
}

}  // namespace

TEST_CASE("control socket: past the client cap a connection reads a one-line error and is closed, the others are kept") {
  SocketDir dir;
  auto control = ControlSocket::open(dir.path + "/ctl.sock", ControlSocketLimits{.max_clients = 3, .idle_ms = 30'000});
  REQUIRE(control.ok());
  int answered = 0;
  std::vector<UniqueFd> clients;
  for (int i = 0; i < 3; ++i) clients.push_back(connect_to(dir.path + "/ctl.sock"));
  control->pump(answer_status(answered), 0);
  REQUIRE(control->client_count() == 3);
  UniqueFd extra = connect_to(dir.path + "/ctl.sock");
  control->pump(answer_status(answered), 0);
  std::optional<std::string> refused = closed_with(extra.get(), 5000);
  REQUIRE(refused.has_value());
  CHECK(*refused ==
        "{\"message\":\"ctl.sock: the supervisor already serves 3 clients (the limit); retry when some have closed "
        "(a program that keeps connections to ctl.sock open holds them)\",\"type\":\"error\"}\n");
  for (const UniqueFd& client : clients) CHECK_FALSE(closed_with(client.get()).has_value());
  CHECK(control->client_count() == 3);

  // A client that asks is answered; its place is free for the next one.
  REQUIRE(dtrain::write_all(clients[0].get(), "{\"type\":\"status\"}\n").ok());
  control->pump(answer_status(answered), 0);
  std::optional<std::string> reply = closed_with(clients[0].get(), 5000);
  REQUIRE(reply.has_value());
  CHECK(contains(*reply, "\"state\":\"running\""));
  CHECK(answered == 1);
  UniqueFd next = connect_to(dir.path + "/ctl.sock");
  control->pump(answer_status(answered), 0);
  CHECK_FALSE(closed_with(next.get()).has_value());
  CHECK(control->client_count() == 3);
}

TEST_CASE("control socket: a client without a complete request is closed once the idle timeout passes") {
  SocketDir dir;
  auto control = ControlSocket::open(dir.path + "/ctl.sock", ControlSocketLimits{.max_clients = 64, .idle_ms = 1000});
  REQUIRE(control.ok());
  int answered = 0;
  UniqueFd silent = connect_to(dir.path + "/ctl.sock");
  control->pump(answer_status(answered), 10'000);
  UniqueFd partial = connect_to(dir.path + "/ctl.sock");
  control->pump(answer_status(answered), 10'500);
  REQUIRE(dtrain::write_all(partial.get(), "{\"type\":\"sta").ok());  // no newline: not a request yet
  control->pump(answer_status(answered), 10'999);
  CHECK_FALSE(closed_with(silent.get()).has_value());
  CHECK_FALSE(closed_with(partial.get()).has_value());

  control->pump(answer_status(answered), 11'000);  // 1000 ms after `silent` connected
  std::optional<std::string> closed = closed_with(silent.get(), 5000);
  REQUIRE(closed.has_value());
  CHECK(contains(*closed, "ctl.sock: no complete request within 1000 ms of connecting; closed"));
  CHECK_FALSE(closed_with(partial.get()).has_value());  // 500 ms left
  control->pump(answer_status(answered), 11'500);
  CHECK(closed_with(partial.get(), 5000).has_value());
  CHECK(control->client_count() == 0);
  CHECK(answered == 0);

  // The socket goes on: a client that asks in time is answered.
  UniqueFd asking = connect_to(dir.path + "/ctl.sock");
  REQUIRE(dtrain::write_all(asking.get(), "{\"type\":\"status\"}\n").ok());
  control->pump(answer_status(answered), 20'000);
  std::optional<std::string> reply = closed_with(asking.get(), 5000);
  REQUIRE(reply.has_value());
  CHECK(contains(*reply, "\"type\":\"ok\""));
}
