// A real `dtrain agent` puts its worker socket in the runtime directory the supervisor names,
// whole (config.runtime_dir; never a path derived from a uid), after checking every component.
// A directory another user could have planted a socket in (owned by another uid, a symlink, mode
// 0755) is not used, and it does not stop the run either: the agent makes a fresh private
// directory next to it (mkdtemp), says so once after hello (error {about:"runtime_dir"} naming
// the refused directory and its owner) and goes on; workers connect there. Only a bad run id is
// refused (error {about:"config"}, exit 3). Each test plants its blocker in a temp directory of
// its own, never in the shared /tmp/dtrain-<uid>.

#include <doctest/doctest.h>

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "tests/integration/support/agent_session.h"
#include "tests/skip.h"

using dtrain::test::AgentSession;
using dtrain::test::spawn_message;
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
  }
  ~TempBase() { std::filesystem::remove_all(dir); }
  std::string runtime_dir() const { return base + "/r1a2b3"; }
};

mode_t mode_of(const std::string& path) {
  struct stat info{};
  REQUIRE(::lstat(path.c_str(), &info) == 0);
  return info.st_mode & 07777;
}

// The agent does not use the requested directory but a fresh one `<base>-XXXXXX/r1a2b3`, says
// why in error {about:"runtime_dir"} (holding `expected`), and a worker started there connects
// (its hello comes back): the run goes on. Then fences and checks that the fallback is removed.
void expect_fallback(AgentSession& session, const TempBase& temp, const std::string& expected) {
  auto hello = session.handshake({{"runtime_dir", temp.runtime_dir()}});
  REQUIRE(hello);
  std::string socket_path = (*hello)["socket"];
  std::string fallback_base = socket_path.substr(0, socket_path.size() - std::string("/r1a2b3/localhost.sock").size());
  CHECK(fallback_base.rfind(temp.base + "-", 0) == 0);
  CHECK(fallback_base.size() == temp.base.size() + 7);
  CHECK(socket_path == fallback_base + "/r1a2b3/localhost.sock");
  CHECK(mode_of(fallback_base) == 0700);
  auto note = session.wait_for_type("error", 10'000);
  REQUIRE(note);
  CHECK((*note)["about"] == "runtime_dir");
  std::string message = (*note)["message"];
  CHECK_MESSAGE(message.find(expected) != std::string::npos, message);
  CHECK_MESSAGE(message.find("this run's worker socket is in '" + fallback_base + "/r1a2b3' instead") != std::string::npos,
                message);

  json spawn = spawn_message(0, {0}, {"/usr/bin/python3", "-c", R"(
import json, os, socket
s = socket.socket(socket.AF_UNIX)
s.connect(os.environ['DTRAIN_AGENT_SOCKET'])
s.sendall((json.dumps({'type': 'hello', 'rank': 0, 'gen': 0, 'pid': os.getpid()}) + '\n').encode())
)"}, session.run_id());
  session.send(spawn);
  CHECK(session.wait_for([](const json& m) { return m["type"] == "from_worker" && m["msg"]["type"] == "hello"; }));
  CHECK(session.wait_for([](const json& m) { return m["type"] == "exit" && m["rank"] == 0; }));
  int errors = 0;
  for (const json& seen : session.history()) errors += seen["type"] == "error" ? 1 : 0;
  CHECK(errors == 1);  // said once

  session.send({{"type", "fence"}, {"reason", "test done"}});
  REQUIRE(session.wait_closed());
  CHECK(session.connection().close_reason() == "agent exited with code 0");
  CHECK(::access(fallback_base.c_str(), F_OK) != 0);  // the run's own: removed with the socket
}

}  // namespace

TEST_CASE("the agent puts the socket in the supervisor's runtime_dir, whole, whatever uid it names") {
  TempBase temp;
  AgentSession session(DTRAIN_EXE);
  // A launch node's uid (in the name) decides nothing: the path is used as given, when ours.
  std::string requested = temp.dir + "/dtrain-424242/r1a2b3";
  auto hello = session.handshake({{"runtime_dir", requested}});
  REQUIRE(hello);
  std::string socket_path = (*hello)["socket"];
  CHECK(socket_path == requested + "/localhost.sock");
  CHECK(mode_of(temp.dir + "/dtrain-424242") == 0700);
  CHECK(mode_of(requested) == 0700);
  session.send({{"type", "fence"}, {"reason", "test done"}});
  REQUIRE(session.wait_closed());
  CHECK(::access(socket_path.c_str(), F_OK) != 0);
  for (const json& seen : session.history()) CHECK(seen["type"] != "error");
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

TEST_CASE("a base pre-created by another uid is not used: a private one instead, the run goes on") {
  if (::geteuid() != 0) dtrain::testing::skip_test("needs root to create a directory owned by uid 65534");
  if (::access("/usr/bin/python3", X_OK) != 0) dtrain::testing::skip_test("the worker needs /usr/bin/python3");
  TempBase temp;
  REQUIRE(::mkdir(temp.base.c_str(), 0700) == 0);
  REQUIRE(::chown(temp.base.c_str(), 65534, 65534) == 0);
  AgentSession session(DTRAIN_EXE);
  expect_fallback(session, temp, "runtime directory '" + temp.base + "' belongs to uid 65534, not to this process's uid " +
                                     std::to_string(::geteuid()));
  CHECK(std::filesystem::is_empty(temp.base));  // nothing of ours went into it
}

TEST_CASE("a symlinked base is not followed: a private one instead, the run goes on") {
  if (::access("/usr/bin/python3", X_OK) != 0) dtrain::testing::skip_test("the worker needs /usr/bin/python3");
  TempBase temp;
  std::string elsewhere = temp.dir + "/elsewhere";
  REQUIRE(::mkdir(elsewhere.c_str(), 0700) == 0);
  REQUIRE(::symlink(elsewhere.c_str(), temp.base.c_str()) == 0);
  AgentSession session(DTRAIN_EXE);
  expect_fallback(session, temp, "runtime directory '" + temp.base + "' is a symbolic link");
  CHECK(std::filesystem::is_empty(elsewhere));
}

TEST_CASE("a base of mode 0755 is not used: a private one instead, the run goes on") {
  if (::access("/usr/bin/python3", X_OK) != 0) dtrain::testing::skip_test("the worker needs /usr/bin/python3");
  TempBase temp;
  REQUIRE(::mkdir(temp.base.c_str(), 0700) == 0);
  REQUIRE(::chmod(temp.base.c_str(), 0755) == 0);
  AgentSession session(DTRAIN_EXE);
  expect_fallback(session, temp, "runtime directory '" + temp.base + "' has mode 0755, not 0700");
}
