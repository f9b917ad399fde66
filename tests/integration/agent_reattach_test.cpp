// Re-attaching (proto/messages.h config.reattach_ms, attach, reattached): a relayed host's agent
// whose channel ends keeps its workers and waits on its attach socket; a fresh `dtrain agent`
// whose first frame is attach carries a new channel to it. Real processes: the agent under test,
// its workers, and the second agent process that becomes the pipe.

#include <doctest/doctest.h>

#include <signal.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "launcher/base/fd.h"
#include "tests/integration/dtrain_runner.h"
#include "tests/integration/support/agent_session.h"
#include "tests/integration/support/process_probe.h"

using dtrain::test::AgentSession;
using dtrain::test::spawn_message;
using nlohmann::json;

namespace {

/// Rank 0 sleeps; rank 1 exits 7 once `release` exists (so that it ends while the agent is
/// detached, when the test says).
std::vector<pid_t> start_two(AgentSession& session, const std::string& release) {
  json spawn = spawn_message(0, {0, 1}, {"/bin/sh", "-c", "echo ready; if [ \"$RANK\" = 1 ]; then while [ ! -e \"$RELEASE\" ]; do sleep 0.02; done; exit 7; fi; exec sleep 1000"},
                             session.run_id());
  for (int i = 0; i < 2; ++i) spawn["workers"][i]["env"] = {{"RANK", std::to_string(i)}, {"RELEASE", release}};
  session.send(spawn);
  std::vector<pid_t> pids;
  for (int rank : {0, 1}) {
    auto started = session.wait_for([&](const json& m) { return m["type"] == "started" && m["rank"] == rank; });
    REQUIRE(started);
    pids.push_back((*started)["pid"].get<pid_t>());
    REQUIRE(session.wait_for([&](const json& m) { return m["type"] == "log" && m["rank"] == rank && m["line"] == "ready"; }));
  }
  return pids;
}

bool alive(pid_t pid) { return !dtrain::test::is_gone(pid); }

/// One worker of generation 0 that sleeps; its pid.
pid_t start_sleeper(AgentSession& session) {
  session.send(spawn_message(0, {0}, {"/bin/sh", "-c", "echo ready; exec sleep 1000"}, session.run_id()));
  auto started = session.wait_for_type("started");
  REQUIRE(started);
  return (*started)["pid"].get<pid_t>();
}

/// The agent under test is the test's own child (LocalTransport): gone once its session reaped it.
bool agent_exited(AgentSession& session, int timeout_ms = 10'000) {
  for (int waited = 0; waited < timeout_ms; waited += 20) {
    session.connection().pump();
    if (session.connection().wait_status()) return true;
    ::usleep(20'000);
  }
  return false;
}

}  // namespace

TEST_CASE("a re-attachable agent keeps its workers when its channel ends, and a re-attach gets them back with the exit it missed") {
  dtrain::testing::TempDir scratch;  // removed whatever the outcome
  std::string release = scratch.path + "/release";
  AgentSession first(DTRAIN_EXE, "h1");
  auto hello = first.handshake({{"reattach_ms", 20'000}});
  REQUIRE(hello);
  REQUIRE(hello->contains("attach_socket"));
  std::string attach_socket = (*hello)["attach_socket"];
  CHECK(attach_socket.find(first.runtime_dir()) == 0);
  std::vector<pid_t> workers = start_two(first, release);

  // The channel ends (as when the relay carrying it dies): no bye, no fence.
  first.connection().close_input();
  REQUIRE(first.wait_closed(15'000));
  CHECK_FALSE(first.wait_for_type("bye", 0));
  CHECK(alive(first.agent_pid()));
  CHECK(alive(workers[0]));
  CHECK(first.diagnostics().find("waiting up to 20s for a re-attach at " + attach_socket) != std::string::npos);

  // Rank 1 ends while nobody listens.
  REQUIRE(dtrain::write_file_atomic(release, "go"));
  REQUIRE(dtrain::test::wait_until_gone(workers[1], 10'000));

  AgentSession pipe(DTRAIN_EXE, "h1");
  pipe.send({{"type", "attach"}, {"socket", attach_socket}});
  auto reattached = pipe.wait_for_type("reattached");
  REQUIRE(reattached);
  CHECK((*reattached)["host"] == "h1");
  CHECK((*reattached)["pid"] == first.agent_pid());
  CHECK((*reattached)["reason"].get<std::string>().find("stdin EOF") != std::string::npos);
  CHECK((*reattached)["detached_ms"].get<int64_t>() >= 0);
  REQUIRE((*reattached)["workers"].size() == 1);
  CHECK((*reattached)["workers"][0] == json{{"gen", 0}, {"rank", 0}, {"pid", workers[0]}});
  REQUIRE((*reattached)["exits"].size() == 1);
  CHECK((*reattached)["exits"][0]["rank"] == 1);
  CHECK((*reattached)["exits"][0]["code"] == 7);
  // What it queued while detached follows: the exit frame itself.
  auto exit = pipe.wait_for([](const json& m) { return m["type"] == "exit" && m["rank"] == 1; });
  REQUIRE(exit);
  CHECK((*exit)["code"] == 7);

  // The new channel is the agent's channel: it answers, and a fence through it ends everything.
  pipe.send({{"type", "ping"}, {"id", 5}, {"supervisor_time_ms", 1}});
  auto pong = pipe.wait_for_type("pong");
  REQUIRE(pong);
  CHECK((*pong)["id"] == 5);
  pipe.send({{"type", "fence"}, {"reason", "test over"}});
  auto bye = pipe.wait_for_type("bye", 15'000);
  REQUIRE(bye);
  CHECK((*bye)["reason"] == "the supervisor asked to fence (test over)");
  REQUIRE(pipe.wait_closed(15'000));
  CHECK(agent_exited(first));
  CHECK(dtrain::test::wait_until_all_gone({workers[0]}, 10'000).empty());
  CHECK(dtrain::test::wait_until_run_gone(first.run_id(), 5000).empty());
  CHECK(agent_exited(pipe));
  CHECK(::access(attach_socket.c_str(), F_OK) != 0);  // removed at the fence
}

TEST_CASE("a silent supervisor detaches a re-attachable agent instead of fencing it, and a re-attach says why") {
  AgentSession first(DTRAIN_EXE, "h2");
  auto hello = first.handshake({{"reattach_ms", 20'000}, {"heartbeat_timeout_ms", 500}, {"heartbeat_interval_ms", 100}});
  REQUIRE(hello);
  std::string attach_socket = (*hello)["attach_socket"];
  pid_t worker = start_sleeper(first);
  // Nothing more from the test: after 500 ms the agent gives the channel up (as across a
  // partition) and keeps the worker.
  REQUIRE(first.wait_closed(15'000));
  CHECK(alive(first.agent_pid()));
  CHECK(alive(worker));

  AgentSession pipe(DTRAIN_EXE, "h2");
  pipe.send({{"type", "attach"}, {"socket", attach_socket}});
  auto reattached = pipe.wait_for_type("reattached");
  REQUIRE(reattached);
  CHECK((*reattached)["reason"] == "supervisor silent for 500ms");
  REQUIRE((*reattached)["workers"].size() == 1);
  pipe.send({{"type", "fence"}, {"reason", "test over"}});
  REQUIRE(pipe.wait_for_type("bye", 15'000));
  CHECK(agent_exited(first));
  CHECK(dtrain::test::wait_until_all_gone({worker}, 10'000).empty());
}

TEST_CASE("no re-attach within reattach_ms: the agent fences as it would have at once, and a late attach is told why") {
  AgentSession first(DTRAIN_EXE, "h3");
  auto hello = first.handshake({{"reattach_ms", 600}});
  REQUIRE(hello);
  std::string attach_socket = (*hello)["attach_socket"];
  pid_t worker = start_sleeper(first);
  first.connection().close_input();
  REQUIRE(first.wait_closed(15'000));
  REQUIRE(agent_exited(first, 15'000));
  CHECK(dtrain::test::is_gone(worker));
  CHECK(first.diagnostics().find("and nothing re-attached within 600ms; fencing: killed 1 worker") != std::string::npos);
  CHECK(::access(attach_socket.c_str(), F_OK) != 0);

  AgentSession late(DTRAIN_EXE, "h3");
  late.send({{"type", "attach"}, {"socket", attach_socket}});
  auto error = late.wait_for_type("error");
  REQUIRE(error);
  CHECK((*error)["about"] == "attach");
  CHECK((*error)["message"].get<std::string>().find("no agent waits at " + attach_socket) != std::string::npos);
  REQUIRE(late.wait_closed());
  REQUIRE(late.connection().wait_status());
  CHECK(late.connection().close_reason() == "agent exited with code 3");
}

TEST_CASE("without reattach_ms there is no attach socket, and attach after config is a protocol error") {
  AgentSession session(DTRAIN_EXE, "h4");
  auto hello = session.handshake();
  REQUIRE(hello);
  CHECK_FALSE(hello->contains("attach_socket"));
  session.send({{"type", "attach"}, {"socket", "/tmp/x.attach"}});
  auto bye = session.wait_for_type("bye", 15'000);
  REQUIRE(bye);
  CHECK((*bye)["reason"].get<std::string>().find("attach after config") != std::string::npos);
}
