// Killing and fencing: after `released`, or after the agent fences (stdin EOF, silence, a
// malformed frame, a signal), no process of the generation exists — not a worker that ignores
// TERM, not a grandchild that daemonised with setsid.

#include <doctest/doctest.h>

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <string>
#include <vector>

#include "tests/integration/support/agent_session.h"
#include "tests/integration/support/process_probe.h"

using dtrain::test::AgentSession;
using dtrain::test::spawn_message;
using nlohmann::json;

namespace {

// A worker that daemonises a grandchild (setsid, so outside its process group) and reports its
// pid, and, on odd ranks, ignores SIGTERM so that only the KILL after the grace ends it. With
// EXIT_EARLY set it exits at once, leaving its grandchild an orphan that the agent (a child
// subreaper) adopts.
const char* kStubbornWorker =
    "if [ -n \"$EXIT_EARLY\" ]; then "
    "  setsid sh -c 'exec sleep 1000' & echo grandchild $!; echo ready; exit 0; "
    "fi; "
    "setsid sh -c 'echo grandchild $$; exec sleep 1000' & "
    "if [ $((RANK % 2)) = 1 ]; then trap '' TERM; fi; echo ready; exec sleep 1000";

struct Started {
  std::vector<pid_t> workers;
  std::vector<pid_t> grandchildren;
  std::vector<pid_t> all() const {
    std::vector<pid_t> pids = workers;
    pids.insert(pids.end(), grandchildren.begin(), grandchildren.end());
    return pids;
  }
};

// Spawns stubborn workers for `ranks` in `gen` and waits until each is ready and has reported
// its grandchild.
Started start_stubborn(AgentSession& session, int gen, const std::vector<int>& ranks,
                       const std::vector<int>& exit_early = {}) {
  json spawn = spawn_message(gen, ranks, {"/bin/sh", "-c", kStubbornWorker}, session.run_id());
  for (size_t i = 0; i < ranks.size(); ++i) {
    spawn["workers"][i]["env"] = {{"RANK", std::to_string(ranks[i])}};
    if (std::count(exit_early.begin(), exit_early.end(), ranks[i])) {
      spawn["workers"][i]["env"]["EXIT_EARLY"] = "1";
    }
  }
  session.send(spawn);
  Started started;
  for (int rank : ranks) {
    auto message = session.wait_for([&](const json& m) {
      return m["type"] == "started" && m["rank"] == rank && m["gen"] == gen;
    });
    REQUIRE(message);
    started.workers.push_back((*message)["pid"].get<pid_t>());
    REQUIRE(session.wait_for([&](const json& m) {
      return m["type"] == "log" && m["rank"] == rank && m["line"] == "ready";
    }));
    auto grandchild = session.wait_for([&](const json& m) {
      return m["type"] == "log" && m["rank"] == rank &&
             m["line"].get<std::string>().rfind("grandchild ", 0) == 0;
    });
    REQUIRE(grandchild);
    started.grandchildren.push_back(std::stoi((*grandchild)["line"].get<std::string>().substr(11)));
  }
  for (pid_t pid : started.grandchildren) REQUIRE_FALSE(dtrain::test::is_gone(pid));
  return started;
}

void check_all_gone_now(const std::vector<pid_t>& pids) {
  for (pid_t pid : pids) CHECK_MESSAGE(dtrain::test::is_gone(pid), dtrain::test::describe_process(pid));
}

void check_run_gone(AgentSession& session, const std::vector<pid_t>& pids) {
  session.connection().shutdown(5000);
  CHECK(dtrain::test::wait_until_all_gone(pids, 5000).empty());
  CHECK(dtrain::test::wait_until_run_gone(session.run_id(), 5000).empty());
  CHECK(dtrain::test::list_descendants(session.agent_pid()).empty());
}

}  // namespace

TEST_CASE("kill TERM - released comes after every process of the generation is gone (stubborn ones by KILL)") {
  AgentSession session(DTRAIN_EXE);
  REQUIRE(session.handshake());
  Started gen1 = start_stubborn(session, 1, {0, 1, 4}, /*exit_early=*/{4});
  Started gen2 = start_stubborn(session, 2, {2});
  // Rank 4 is gone; its daemon is now the agent's (orphan adopted by the subreaper).
  auto early = session.wait_for([](const json& m) { return m["type"] == "exit" && m["rank"] == 4; });
  REQUIRE(early);
  CHECK((*early)["code"] == 0);
  pid_t orphan = gen1.grandchildren[2];
  // The kernel reparents before the agent can reap rank 4, so by its exit message it is done.
  std::vector<pid_t> agent_tree = dtrain::test::list_descendants(session.agent_pid());
  REQUIRE(std::count(agent_tree.begin(), agent_tree.end(), orphan) == 1);

  session.send({{"type", "kill"}, {"gen", 1}, {"signal", "TERM"}, {"grace_ms", 300}});
  auto released = session.wait_for_type("released");
  REQUIRE(released);
  CHECK((*released)["gen"] == 1);
  CHECK((*released)["remaining"] == 0);
  std::vector<pid_t> killed = (*released)["killed"].get<std::vector<pid_t>>();
  for (pid_t pid : {gen1.workers[0], gen1.workers[1], gen1.grandchildren[0], gen1.grandchildren[1], orphan}) {
    CHECK_MESSAGE(std::count(killed.begin(), killed.end(), pid) == 1, pid);
  }
  // released means reaped: nothing of generation 1 exists any more, not even as a zombie.
  check_all_gone_now(gen1.all());

  // Each exit came before released; TERM ended rank 0, rank 1 ignored it and took a KILL.
  size_t released_at = session.history().size();
  for (size_t i = 0; i < session.history().size(); ++i) {
    if (session.history()[i]["type"] == "released") released_at = i;
  }
  for (int rank : {0, 1}) {
    auto exit = session.wait_for([&](const json& m) { return m["type"] == "exit" && m["rank"] == rank; }, 0);
    REQUIRE(exit);
    CHECK((*exit)["killed_by_agent"] == true);
    CHECK((*exit)["signal_name"] == (rank == 0 ? "SIGTERM" : "SIGKILL"));
    size_t at = 0;
    for (size_t i = 0; i < session.history().size(); ++i) {
      if (session.history()[i] == *exit) at = i;
    }
    CHECK(at < released_at);
  }

  // Generation 2 was not touched.
  for (pid_t pid : gen2.all()) CHECK_FALSE(dtrain::test::is_gone(pid));
  CHECK_FALSE(session.wait_for([](const json& m) { return m["type"] == "exit" && m["rank"] == 2; }, 200));

  // gen -1 takes everything else.
  session.send({{"type", "kill"}, {"gen", -1}, {"signal", "KILL"}, {"grace_ms", 0}});
  auto released_all = session.wait_for_type("released");
  REQUIRE(released_all);
  CHECK((*released_all)["gen"] == -1);
  check_all_gone_now(gen2.all());
  check_run_gone(session, gen1.all());
}

TEST_CASE("closing the agent's stdin - it kills everything and says bye and exits 0") {
  AgentSession session(DTRAIN_EXE);
  REQUIRE(session.handshake());
  Started started = start_stubborn(session, 1, {0, 1});
  session.connection().close_input();
  REQUIRE(session.wait_closed(15'000));
  auto bye = session.wait_for_type("bye", 0);
  REQUIRE(bye);
  CHECK((*bye)["reason"].get<std::string>().find("stdin EOF") != std::string::npos);
  REQUIRE(session.connection().wait_status());
  CHECK(session.connection().close_reason() == "agent exited with code 0");
  check_all_gone_now(started.all());
  CHECK(session.diagnostics().find("fencing: killed 2 workers") != std::string::npos);
  check_run_gone(session, started.all());
}

TEST_CASE("a supervisor silent for heartbeat_timeout makes the agent fence and exit 3") {
  AgentSession session(DTRAIN_EXE);
  REQUIRE(session.handshake({{"heartbeat_timeout_ms", 700}, {"heartbeat_interval_ms", 100}}));
  Started started = start_stubborn(session, 1, {0});
  // From here on the test says nothing.
  auto bye = session.wait_for_type("bye", 15'000);
  REQUIRE(bye);
  CHECK((*bye)["reason"] == "supervisor silent for 700ms");
  REQUIRE(session.wait_closed());
  CHECK(session.connection().close_reason() == "agent exited with code 3");
  check_all_gone_now(started.all());
  CHECK(session.diagnostics().find("agent localhost: supervisor silent for 700ms; fencing: killed 1 worker") !=
        std::string::npos);
  check_run_gone(session, started.all());
}

TEST_CASE("a fence message and SIGTERM to the agent both end every worker") {
  SUBCASE("fence") {
    AgentSession session(DTRAIN_EXE);
    REQUIRE(session.handshake());
    Started started = start_stubborn(session, 1, {0});
    session.send({{"type", "fence"}, {"reason", "test"}});
    auto bye = session.wait_for_type("bye", 15'000);
    REQUIRE(bye);
    CHECK((*bye)["reason"] == "the supervisor asked to fence (test)");
    REQUIRE(session.wait_closed());
    CHECK(session.connection().close_reason() == "agent exited with code 0");
    check_all_gone_now(started.all());
    check_run_gone(session, started.all());
  }
  SUBCASE("SIGTERM") {
    AgentSession session(DTRAIN_EXE);
    REQUIRE(session.handshake());
    Started started = start_stubborn(session, 1, {0, 1});
    ::kill(session.agent_pid(), SIGTERM);
    auto bye = session.wait_for_type("bye", 15'000);
    REQUIRE(bye);
    CHECK((*bye)["reason"] == "received SIGTERM");
    REQUIRE(session.wait_closed());
    CHECK(session.connection().close_reason() == "agent exited with code 130");
    check_all_gone_now(started.all());
    check_run_gone(session, started.all());
  }
}

TEST_CASE("a malformed frame from the supervisor gives an error and a clean fence - never a crash") {
  struct Case {
    const char* name;
    std::string bytes;
    const char* expected;
  };
  std::string garbage = "not json at all";
  std::string length = {0, 0, 0, static_cast<char>(garbage.size())};
  std::vector<Case> cases = {
      {"malformed JSON", length + garbage, "malformed JSON in frame"},
      {"oversized", std::string("\x7f\x00\x00\x00", 4), "exceeds the 8 MiB limit"},
      {"unknown type", dtrain::proto::encode_frame({{"type", "launch_missiles"}}), "unknown message type 'launch_missiles'"},
      {"bad field", dtrain::proto::encode_frame({{"type", "kill"}, {"gen", "one"}, {"signal", "TERM"}}),
       "kill.gen: expected an integer, got a string \"one\""},
  };
  for (const Case& c : cases) {
    CAPTURE(c.name);
    AgentSession session(DTRAIN_EXE);
    REQUIRE(session.handshake());
    Started started = start_stubborn(session, 1, {0});
    session.send_raw(c.bytes);
    auto error = session.wait_for_type("error");
    REQUIRE(error);
    CHECK((*error)["message"].get<std::string>().find(c.expected) != std::string::npos);
    REQUIRE(session.wait_for_type("bye", 15'000));
    REQUIRE(session.wait_closed());
    CHECK(session.connection().close_reason() == "agent exited with code 3");
    CHECK(session.diagnostics().find(c.expected) != std::string::npos);
    check_all_gone_now(started.all());
    check_run_gone(session, started.all());
  }
}

TEST_CASE("a frame before config is refused and a protocol mismatch is explained") {
  {
    AgentSession session(DTRAIN_EXE);
    session.send({{"type", "ping"}, {"id", 1}});
    auto error = session.wait_for_type("error");
    REQUIRE(error);
    CHECK((*error)["message"] == "protocol error: 'ping' before config; config (or attach) must be the first frame");
    REQUIRE(session.wait_closed());
    CHECK(session.connection().close_reason() == "agent exited with code 3");
  }
  {
    AgentSession session(DTRAIN_EXE);
    session.send(session.config({{"protocol", 99}}));
    auto error = session.wait_for_type("error");
    REQUIRE(error);
    CHECK((*error)["message"].get<std::string>().find("supervisor 99") != std::string::npos);
    REQUIRE(session.wait_closed());
  }
  {
    AgentSession session(DTRAIN_EXE);
    session.send(session.config({{"runtime_dir", "/tmp/" + std::string(120, 'd')}}));
    auto error = session.wait_for_type("error");
    REQUIRE(error);
    CHECK((*error)["message"].get<std::string>().find("must fit in 107") != std::string::npos);
    REQUIRE(session.wait_closed());
    CHECK(session.connection().close_reason() == "agent exited with code 3");
  }
}

TEST_CASE("an agent killed outright takes its workers with it (PR_SET_PDEATHSIG)") {
  // Orphans of the dead agent come to us (this process becomes a subreaper for the test), so
  // that they can be reaped here: a leak would show as a live child of the test.
  REQUIRE(::prctl(PR_SET_CHILD_SUBREAPER, 1) == 0);
  std::vector<pid_t> workers;
  {
    AgentSession session(DTRAIN_EXE);
    REQUIRE(session.handshake());
    session.send(spawn_message(1, {0, 1}, {"/bin/sh", "-c", "trap '' TERM; exec sleep 1000"},
                               session.run_id()));
    for (int rank : {0, 1}) {
      auto started = session.wait_for([&](const json& m) { return m["type"] == "started" && m["rank"] == rank; });
      REQUIRE(started);
      workers.push_back((*started)["pid"].get<pid_t>());
    }
    ::kill(session.agent_pid(), SIGKILL);
    REQUIRE(session.wait_closed());
    CHECK(session.connection().close_reason() == "agent killed by SIGKILL");
  }
  // Reap whatever was reparented to us, until every worker is gone.
  for (int round = 0; round < 500; ++round) {
    while (::waitpid(-1, nullptr, WNOHANG) > 0) {
    }
    if (dtrain::test::wait_until_all_gone(workers, 0).empty()) break;
    ::usleep(10'000);
  }
  CHECK(dtrain::test::wait_until_all_gone(workers, 0).empty());
  ::prctl(PR_SET_CHILD_SUBREAPER, 0);
}
