// A real `dtrain agent` makes its worker-socket directory under a base of its own uid, whatever
// uid the supervisor's runtime_dir names, and refuses a base that another user could have
// planted a socket in (owned by another uid, a symlink, mode 0755): error {about:"config"}
// naming the directory, then exit 3. The base is injected with DTRAIN_RUNTIME_BASE (the agent
// inherits this process's environment) so that no test touches the real /tmp/dtrain-<uid>.

#include <doctest/doctest.h>

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "tests/integration/support/agent_session.h"
#include "tests/skip.h"

using dtrain::test::AgentSession;
using nlohmann::json;

namespace {

struct TempBase {
  std::string dir;
  std::string base;
  TempBase() {
    char pattern[] = "/tmp/dtrain-rtdir-XXXXXX";
    REQUIRE(::mkdtemp(pattern) != nullptr);
    dir = pattern;
    base = dir + "/base";
    ::setenv("DTRAIN_RUNTIME_BASE", base.c_str(), 1);
  }
  ~TempBase() {
    ::unsetenv("DTRAIN_RUNTIME_BASE");
    std::filesystem::remove_all(dir);
  }
};

mode_t mode_of(const std::string& path) {
  struct stat info{};
  REQUIRE(::lstat(path.c_str(), &info) == 0);
  return info.st_mode & 07777;
}

// Sends config and expects the refusal: error {about:"config"} whose message holds `expected`,
// no hello, and exit code 3.
void expect_refusal(AgentSession& session, const std::string& expected) {
  session.send(session.config());
  auto error = session.wait_for_type("error", 30'000);
  REQUIRE(error);
  CHECK((*error)["about"] == "config");
  std::string message = (*error)["message"].get<std::string>();
  CHECK_MESSAGE(message.find(expected) != std::string::npos, message);
  REQUIRE(session.wait_closed());
  CHECK(session.connection().close_reason() == "agent exited with code 3");
  for (const json& seen : session.history()) CHECK(seen["type"] != "hello");
}

}  // namespace

TEST_CASE("the agent puts the socket under its own base, taking only the run id from the supervisor") {
  TempBase temp;
  AgentSession session(DTRAIN_EXE);
  // The launch node's uid (here a made-up 424242) does not decide where this host's socket goes.
  auto hello = session.handshake({{"runtime_dir", "/tmp/dtrain-424242/r1a2b3"}});
  REQUIRE(hello);
  std::string socket_path = (*hello)["socket"];
  CHECK(socket_path == temp.base + "/r1a2b3/localhost.sock");
  CHECK(mode_of(temp.base) == 0700);
  CHECK(mode_of(temp.base + "/r1a2b3") == 0700);
  CHECK(::access("/tmp/dtrain-424242", F_OK) != 0);
  session.send({{"type", "fence"}, {"reason", "test done"}});
  REQUIRE(session.wait_closed());
  CHECK(::access(socket_path.c_str(), F_OK) != 0);
}

TEST_CASE("a run id that is not one plain path component is refused at config") {
  TempBase temp;
  AgentSession session(DTRAIN_EXE);
  session.send(session.config({{"runtime_dir", "/tmp/dtrain-0/.."}}));
  auto error = session.wait_for_type("error", 30'000);
  REQUIRE(error);
  CHECK((*error)["about"] == "config");
  CHECK((*error)["message"].get<std::string>().find("config.runtime_dir '/tmp/dtrain-0/..'") != std::string::npos);
  REQUIRE(session.wait_closed());
  CHECK(session.connection().close_reason() == "agent exited with code 3");
}

TEST_CASE("a base pre-created by another uid is refused: error about config, exit 3") {
  if (::geteuid() != 0) dtrain::testing::skip_test("needs root to create a directory owned by uid 65534");
  TempBase temp;
  REQUIRE(::mkdir(temp.base.c_str(), 0700) == 0);
  REQUIRE(::chown(temp.base.c_str(), 65534, 65534) == 0);
  AgentSession session(DTRAIN_EXE);
  expect_refusal(session, "runtime directory '" + temp.base + "' belongs to uid 65534, not to this agent's uid " +
                              std::to_string(::geteuid()));
  CHECK(std::filesystem::is_empty(temp.base));  // nothing of ours went into it
}

TEST_CASE("a symlinked base is refused: error about config, exit 3") {
  TempBase temp;
  std::string elsewhere = temp.dir + "/elsewhere";
  REQUIRE(::mkdir(elsewhere.c_str(), 0700) == 0);
  REQUIRE(::symlink(elsewhere.c_str(), temp.base.c_str()) == 0);
  AgentSession session(DTRAIN_EXE);
  expect_refusal(session, "runtime directory '" + temp.base + "' is a symbolic link");
  CHECK(std::filesystem::is_empty(elsewhere));
}

TEST_CASE("a base of mode 0755 is refused: error about config, exit 3") {
  TempBase temp;
  REQUIRE(::mkdir(temp.base.c_str(), 0700) == 0);
  REQUIRE(::chmod(temp.base.c_str(), 0755) == 0);
  AgentSession session(DTRAIN_EXE);
  expect_refusal(session, "runtime directory '" + temp.base + "' has mode 0755, not 0700");
}
