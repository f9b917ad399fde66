// The control socket's client cap under a real `dtrain submit` (issue 26): 64 connections to
// ctl.sock that never send a request hold every place; the 65th reads a one-line error and is
// closed; the run goes on (its workers keep writing, `dtrain status` shows it running); once
// the 64 close, `dtrain stop` is served over the same socket and the run ends as stopped.
// (The idle timeout is tested in tests/unit/run_control_socket_test.cpp with a short one.)
#include <doctest/doctest.h>

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include "launcher/base/fd.h"
#include "launcher/run/control_socket.h"
#include "tests/integration/dtrain_runner.h"

using namespace dtrain::testing;
using dtrain::UniqueFd;

namespace {

UniqueFd connect_to(const std::string& path) {
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  REQUIRE(path.size() < sizeof address.sun_path);
  std::strncpy(address.sun_path, path.c_str(), sizeof address.sun_path - 1);
  REQUIRE(::connect(fd.get(), reinterpret_cast<sockaddr*>(&address), sizeof address) == 0);
  return fd;
}

/// Everything the peer sends until it closes, or "" with `closed` false when it has not closed
/// within `timeout_ms`.
std::string read_until_closed(int fd, int64_t timeout_ms, bool& closed) {
  std::string text;
  closed = wait_until([&] {
    pollfd entry{fd, POLLIN, 0};
    if (::poll(&entry, 1, 0) <= 0) return false;
    char buffer[4096];
    ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n > 0) text.append(buffer, static_cast<size_t>(n));
    return n == 0;
  }, timeout_ms);
  return text;
}

}  // namespace

TEST_CASE("control socket limits: the 65th client of a live run is refused, the run goes on, and stop works once they close") {
  DtrainEnv env;
  std::string spec = env.write_spec(
      "ctl.yaml",
      "version: 1\nname: ctlcap\nslots_per_host: 1\nworker:\n"
      "  command: [/bin/sh, -c, 'i=0; while true; do echo tick $i; i=$((i+1)); sleep 0.1; done']\n"
      "heartbeat: {interval: 200ms, timeout: 5s, hang_timeout: 60s}\nstop_grace: 2s\n");
  DtrainProcess run = env.start({"submit", spec});
  std::string dir = only_run_dir(env);
  REQUIRE(!dir.empty());
  std::string run_id = run_id_of(dir);
  REQUIRE(wait_until([&] { return read_text(dir + "/ranks/0.log").find("tick 1") != std::string::npos; }, 30'000));
  std::string socket_path = dir + "/ctl.sock";

  std::vector<UniqueFd> holders;
  for (size_t i = 0; i < dtrain::run::kMaxControlClients; ++i) holders.push_back(connect_to(socket_path));
  UniqueFd extra = connect_to(socket_path);
  bool closed = false;
  std::string refusal = read_until_closed(extra.get(), 20'000, closed);
  CHECK(closed);
  CHECK(refusal ==
        "{\"message\":\"ctl.sock: the supervisor already serves 64 clients (the limit); retry when some have closed "
        "(a program that keeps connections to ctl.sock open holds them)\",\"type\":\"error\"}\n");
  // The 64 are kept: checked at once, well within their 30 s idle timeout.
  bool any_closed = false;
  for (const UniqueFd& holder : holders) {
    pollfd entry{holder.get(), POLLIN, 0};
    any_closed = any_closed || ::poll(&entry, 1, 0) > 0;
  }
  CHECK_FALSE(any_closed);

  // The run goes on while every place is held: its worker keeps writing and status shows it.
  size_t ticks = read_text(dir + "/ranks/0.log").size();
  CHECK(wait_until([&] { return read_text(dir + "/ranks/0.log").size() > ticks; }, 20'000));
  DtrainProcess status = env.run({"status", run_id}, 30'000);
  CHECK(status.exit_code == 0);
  CHECK(status.out().find("running") != std::string::npos);

  holders.clear();
  DtrainProcess stop = env.run({"stop", run_id}, 60'000);
  INFO("stop stderr: " << stop.err() << "\nrun stderr: " << run.err());
  CHECK(stop.exit_code == 0);
  CHECK(run.wait(60'000));
  nlohmann::json state = nlohmann::json::parse(read_text(dir + "/state.json"), nullptr, false);
  CHECK(state.value("state", "") == "stopped");
  auto events = read_events(dir + "/events.jsonl");
  CHECK(events_named(events, "host.lost").empty());
  CHECK(events_named(events, "run.stop_requested").size() == 1);
  check_nothing_left(run_id);
}
