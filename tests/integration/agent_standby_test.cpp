// The agent's warm standbys (spawn.standby, issue 17): it keeps standby processes started
// without a rank; a spawn of a DTRAIN_JOIN_LIVE worker assigns one instead of starting a
// process (assign on its socket, started {standby:true} with its pid, its output from then on the
// rank's) and the pool is refilled; a standby that dies unassigned is replaced, not reported;
// kills of a generation leave standbys alone, a kill of every generation ends them. Real agent,
// real python3 processes on the real socket.

#include <doctest/doctest.h>

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "tests/integration/dtrain_runner.h"
#include "tests/integration/support/agent_session.h"
#include "tests/integration/support/process_probe.h"

using dtrain::test::AgentSession;
using dtrain::test::spawn_message;
using nlohmann::json;

namespace {

// A standby (DTRAIN_STANDBY=1) says hello {standby} and prints "standby ready"; on assign it
// takes the env, prints what it became and says the worker's hello. A worker started as one says
// hello at once. Both then print every line they receive.
constexpr const char* kScript = R"(
import json, os, socket
s = socket.socket(socket.AF_UNIX)
s.connect(os.environ['DTRAIN_AGENT_SOCKET'])
def send(m):
    s.sendall((json.dumps(m) + '\n').encode())
lines = s.makefile('r')
if os.environ.get('DTRAIN_STANDBY') == '1':
    send({'type': 'hello', 'standby': True, 'pid': os.getpid()})
    print('standby ready', flush=True)
    assign = json.loads(lines.readline())
    os.environ.update(assign['env'])
    os.environ.pop('DTRAIN_STANDBY', None)
    print('assigned rank %s gen %s error_file %s join_live %s' % (os.environ['RANK'], os.environ['DTRAIN_GENERATION'],
          'TORCHELASTIC_ERROR_FILE' in os.environ, os.environ.get('DTRAIN_JOIN_LIVE')), flush=True)
send({'type': 'hello', 'rank': int(os.environ['RANK']), 'gen': int(os.environ['DTRAIN_GENERATION']), 'pid': os.getpid()})
for line in lines:
    print('got ' + line.strip(), flush=True)
)";

json spawn_workers(const AgentSession& session, int gen, int rank, int standby, const json& extra_env = json::object()) {
  json spawn = spawn_message(gen, {rank}, {"/usr/bin/python3", "-c", kScript}, session.run_id());
  spawn["workers"][0]["env"] = {{"RANK", std::to_string(rank)}};
  spawn["workers"][0]["env"].update(extra_env);
  spawn["standby"] = standby;
  return spawn;
}

std::vector<pid_t> standbys(const AgentSession& session) {
  std::vector<pid_t> of_run = dtrain::test::processes_of_run(session.run_id());
  std::vector<pid_t> found;
  for (pid_t pid : dtrain::test::processes_with_env("DTRAIN_STANDBY", "1")) {
    if (std::find(of_run.begin(), of_run.end(), pid) != of_run.end()) found.push_back(pid);
  }
  return found;
}

/// Pumps the agent until `condition` holds (or 20 s pass).
bool pump_until(AgentSession& session, const std::function<bool()>& condition) {
  return dtrain::testing::wait_until([&] {
    session.wait_for([](const json&) { return false; }, 20);
    return condition();
  }, 20'000);
}

/// Waits for a standby, none of `known` (an assigned one's /proc environ still says
/// DTRAIN_STANDBY=1), whose "standby ready" the agent has passed on (to its stderr).
pid_t wait_ready_standby(AgentSession& session, const std::vector<pid_t>& known = {}) {
  pid_t ready = 0;
  pump_until(session, [&] {
    for (pid_t pid : standbys(session)) {
      std::string line = "standby pid " + std::to_string(pid) + " stdout: standby ready";
      bool new_one = std::find(known.begin(), known.end(), pid) == known.end();
      if (new_one && session.diagnostics().find(line) != std::string::npos) ready = pid;
    }
    return ready != 0;
  });
  return ready;
}

bool is_running(pid_t pid) {
  std::optional<char> state = dtrain::test::process_state(pid);
  return state && *state != 'Z';
}

}  // namespace

TEST_CASE("standby: a join-live spawn assigns the ready standby, the pool refills, kills of a generation spare it") {
  if (::access("/usr/bin/python3", X_OK) != 0) std::exit(77);
  AgentSession session(DTRAIN_EXE);
  REQUIRE(session.handshake());
  session.send(spawn_workers(session, 0, 0, 1));
  auto first = session.wait_for([](const json& m) { return m["type"] == "started" && m["rank"] == 0; });
  REQUIRE(first);
  CHECK_FALSE(first->contains("standby"));
  pid_t worker0 = (*first)["pid"].get<pid_t>();
  pid_t standby = wait_ready_standby(session);
  REQUIRE(standby > 0);
  CHECK(standby != worker0);

  // The rank dies; its kill (with ranks) and the move to generation 1 leave the standby alone.
  session.send({{"type", "kill"}, {"gen", 0}, {"signal", "KILL"}, {"grace_ms", 0}, {"ranks", {0}}});
  REQUIRE(session.wait_for([](const json& m) { return m["type"] == "released" && m["gen"] == 0; }));
  CHECK(is_running(standby));
  session.send({{"type", "gen_changed"}, {"id", 1}, {"from", 0}, {"to", 1}});
  REQUIRE(session.wait_for_type("gen_changed"));

  session.send(spawn_workers(session, 1, 0, 1, {{"DTRAIN_JOIN_LIVE", "1"}}));
  auto started = session.wait_for([](const json& m) { return m["type"] == "started" && m["gen"] == 1; });
  REQUIRE(started);
  CHECK((*started)["pid"] == standby);
  CHECK((*started)["standby"] == true);
  CHECK((*started)["rank"] == 0);
  auto hello = session.wait_for([&](const json& m) {
    return m["type"] == "from_worker" && m["gen"] == 1 && m["rank"] == 0 && m["msg"]["type"] == "hello";
  });
  REQUIRE(hello);
  CHECK((*hello)["pid"] == standby);
  // Its output is now rank 0's, and it has the whole environment of a new worker.
  auto assigned = session.wait_for([](const json& m) {
    return m["type"] == "log" && m["gen"] == 1 && m["rank"] == 0 && m["line"].get<std::string>().rfind("assigned", 0) == 0;
  });
  REQUIRE(assigned);
  CHECK((*assigned)["line"] == "assigned rank 0 gen 1 error_file True join_live 1");
  // What it printed as a standby never was a rank's log.
  for (const json& m : session.history()) {
    if (m["type"] == "log") CHECK(m["line"] != "standby ready");
  }

  // Refilled; a standby that dies unassigned is replaced and not reported.
  pid_t second = wait_ready_standby(session, {standby});
  REQUIRE(second > 0);
  REQUIRE(::kill(second, SIGKILL) == 0);
  pid_t third = wait_ready_standby(session, {standby, second});
  CHECK(third > 0);

  // A kill of generation 1 ends the assigned standby (rank 0 now), not the pool.
  session.send({{"type", "kill"}, {"gen", 1}, {"signal", "TERM"}, {"grace_ms", 2000}});
  auto exit = session.wait_for([](const json& m) { return m["type"] == "exit" && m["gen"] == 1; });
  REQUIRE(exit);
  CHECK((*exit)["pid"] == standby);
  REQUIRE(session.wait_for([](const json& m) { return m["type"] == "released" && m["gen"] == 1; }));
  CHECK(is_running(third));

  // Every generation: the pool too, and it stays empty.
  session.send({{"type", "kill"}, {"gen", -1}, {"signal", "TERM"}, {"grace_ms", 2000}});
  REQUIRE(session.wait_for([](const json& m) { return m["type"] == "released" && m["gen"] == -1; }));
  CHECK(dtrain::test::wait_until_gone(third, 5000));
  for (const json& m : session.history()) {
    if (m["type"] == "exit") CHECK(m["pid"] != second);
    if (m["type"] == "exit") CHECK(m["pid"] != third);
  }
  CHECK(standbys(session).empty());

  session.connection().shutdown(5000);
  CHECK(session.decode_error() == "");
  CHECK(dtrain::test::wait_until_run_gone(session.run_id(), 5000).empty());
}
