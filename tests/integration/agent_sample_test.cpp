// Hung workers through a real `dtrain agent`: the agent samples its own stopped worker (kernel
// wait channel, stack, state) on the supervisor's request and refuses any other pid; and a kill
// reaches a SIGSTOPped worker at once (TERM then CONT) instead of waiting out the grace.

#include <doctest/doctest.h>

#include <signal.h>
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

// Starts one worker running `script` as rank `rank` of `gen`; waits for its "ready" line.
pid_t start_worker(AgentSession& session, int gen, int rank, const std::string& script) {
  session.send(spawn_message(gen, {rank}, {"/bin/sh", "-c", script}, session.run_id()));
  auto started = session.wait_for([&](const json& m) { return m["type"] == "started" && m["rank"] == rank; });
  REQUIRE(started);
  REQUIRE(session.wait_for([&](const json& m) {
    return m["type"] == "log" && m["rank"] == rank && m["line"] == "ready";
  }));
  return (*started)["pid"].get<pid_t>();
}

// Stops the worker's whole process group and waits until the kernel shows it stopped.
void stop_group(pid_t leader) {
  REQUIRE(::kill(-leader, SIGSTOP) == 0);
  bool stopped = false;
  for (int i = 0; i < 500 && !stopped; ++i) {
    stopped = dtrain::test::process_state(leader) == 'T';
    if (!stopped) ::usleep(10'000);
  }
  REQUIRE_MESSAGE(stopped, dtrain::test::describe_process(leader));
}

std::optional<json> wait_sample(AgentSession& session, int id) {
  return session.wait_for([id](const json& m) { return m["type"] == "sample" && m["id"] == id; }, 20'000);
}

void finish(AgentSession& session, const std::vector<pid_t>& pids) {
  session.connection().shutdown(5000);
  CHECK(session.decode_error() == "");
  for (pid_t pid : pids) {
    CHECK_MESSAGE(dtrain::test::wait_until_gone(pid, 5000), dtrain::test::describe_process(pid));
  }
  CHECK(dtrain::test::wait_until_run_gone(session.run_id(), 5000).empty());
}

}  // namespace

TEST_CASE("sample describes a stopped worker of the agent and refuses every other pid") {
  AgentSession session(DTRAIN_EXE);
  REQUIRE(session.handshake());
  pid_t worker = start_worker(session, 3, 1, "echo ready; exec sleep 1000");
  stop_group(worker);

  session.send({{"type", "sample"}, {"id", 7}, {"gen", 3}, {"rank", 1}, {"pid", worker},
                {"timeout_ms", 1000}});
  auto sample = wait_sample(session, 7);
  REQUIRE(sample);
  CHECK_FALSE(sample->contains("error"));
  CHECK((*sample)["gen"] == 3);
  CHECK((*sample)["rank"] == 1);
  CHECK((*sample)["pid"] == worker);
  std::string text = (*sample)["text"].get<std::string>();
  INFO(text);
  CHECK(text.rfind("pid " + std::to_string(worker) + "\n", 0) == 0);
  CHECK(text.find("Name:\t") != std::string::npos);  // sh or sleep: STOP may come before exec
  CHECK(text.find("State:\tT (stopped)") != std::string::npos);
  CHECK(text.find("== wchan\ndo_signal_stop") != std::string::npos);  // what the kernel says it waits in
  CHECK(text.find("== kernel stack") != std::string::npos);
  CHECK(text.find("== backtrace (gdb)") != std::string::npos);
  CHECK(text.size() <= dtrain::proto::kMaxSampleTextBytes);
  // A beat follows each sample so that a row of them never looks like a silent agent.
  CHECK(session.wait_for([&](const json& m) { return m["type"] == "beat"; }, 5000));
  std::optional<char> after = dtrain::test::process_state(worker);
  // gdb may leave it briefly in tracing stop ('t') as it detaches; it must still be there.
  CHECK_MESSAGE((after && *after != 'Z'), "sampling killed the worker: " << dtrain::test::describe_process(worker));

  // Refused: a process that is not the agent's (this test), the agent itself, the right pid
  // under the wrong rank or generation, and a worker that has exited.
  struct Case { int id; int gen; int rank; int64_t pid; };
  std::vector<Case> refused = {{8, 3, 1, ::getpid()}, {9, 3, 1, session.agent_pid()},
                               {10, 3, 0, worker}, {11, 2, 1, worker}, {12, 3, 1, -1}};
  for (const Case& c : refused) {
    session.send({{"type", "sample"}, {"id", c.id}, {"gen", c.gen}, {"rank", c.rank}, {"pid", c.pid},
                  {"timeout_ms", 1000}});
    auto reply = wait_sample(session, c.id);
    REQUIRE(reply);
    CAPTURE(reply->dump());
    CHECK_FALSE(reply->contains("text"));
    CHECK((*reply)["pid"] == c.pid);
    CHECK((*reply)["error"].get<std::string>().find("is not rank " + std::to_string(c.rank) +
                                                    " of generation " + std::to_string(c.gen) +
                                                    " on localhost") != std::string::npos);
  }

  pid_t quitter = start_worker(session, 3, 2, "echo ready; exit 0");
  REQUIRE(session.wait_for([](const json& m) { return m["type"] == "exit" && m["rank"] == 2; }));
  session.send({{"type", "sample"}, {"id", 13}, {"gen", 3}, {"rank", 2}, {"pid", quitter}, {"timeout_ms", 1000}});
  auto exited = wait_sample(session, 13);
  REQUIRE(exited);
  CHECK((*exited)["error"].get<std::string>().find("not a live worker") != std::string::npos);

  // The agent is still itself: it answers, and the stopped worker is killed on request.
  session.send({{"type", "ping"}, {"id", 1}});
  CHECK(session.wait_for_type("pong"));
  session.send({{"type", "kill"}, {"gen", 3}, {"signal", "KILL"}, {"grace_ms", 0}});
  CHECK(session.wait_for_type("released"));
  finish(session, {worker, quitter});
}

TEST_CASE("a kill releases a SIGSTOPped worker that exits on TERM long before the grace ends") {
  AgentSession session(DTRAIN_EXE);
  REQUIRE(session.handshake());
  // One process that exits 0 on TERM; only a TERM it can act on (it must run again: CONT)
  // produces "got TERM". (Not a shell with a background child: a child forked with the trap
  // can swallow TERM before it execs.)
  pid_t worker = start_worker(session, 1, 0,
                              "exec /usr/bin/python3 -c \"import signal, sys, time\n"
                              "def stop(*_):\n    print('got TERM', flush=True)\n    sys.exit(0)\n"
                              "signal.signal(signal.SIGTERM, stop)\nprint('ready', flush=True)\n"
                              "time.sleep(1000)\"");
  stop_group(worker);

  // A grace of 30 s: released within 10 s is only possible if TERM took effect, and exit code 0
  // with "got TERM" proves it was TERM, not the KILL after the grace.
  session.send({{"type", "kill"}, {"gen", 1}, {"signal", "TERM"}, {"grace_ms", 30'000}});
  auto released = session.wait_for_type("released", 10'000);
  if (!released) {
    std::string seen;
    for (const json& m : session.history()) {
      if (m["type"] != "beat") seen += m.dump().substr(0, 200) + "\n";
    }
    for (pid_t pid : dtrain::test::list_descendants(session.agent_pid())) {
      seen += "left: " + dtrain::test::describe_process(pid) + "\n";
    }
    FAIL("a stopped worker ignored TERM: no released within 10 s of a 30 s grace; worker "
         << dtrain::test::describe_process(worker) << "; received:\n" << seen
         << "agent stderr:\n" << session.diagnostics());
  }
  CHECK((*released)["remaining"] == 0);
  auto exit = session.wait_for([](const json& m) { return m["type"] == "exit" && m["rank"] == 0; }, 1000);
  REQUIRE(exit);
  CHECK_MESSAGE((*exit)["code"] == 0, exit->dump());
  CHECK((*exit)["killed_by_agent"] == true);
  const json& tail = (*exit)["tail"];
  CHECK_MESSAGE(std::find(tail.begin(), tail.end(), "got TERM") != tail.end(), tail.dump());
  finish(session, {worker});
}
