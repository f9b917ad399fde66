// The agent's warm standbys (spawn.standby, issue 17): it keeps standby processes started
// without a rank; a spawn of a DTRAIN_JOIN_LIVE worker assigns one instead of starting a
// process (assign on its socket, started {standby:true} with its pid, its output from then on the
// rank's) and the pool is refilled; a standby that dies unassigned is replaced, not reported;
// kills of a generation leave standbys alone, a kill of every generation ends them; a promoted
// standby's flight-recorder dump is looked for where the agent told it to dump, never at PyTorch's
// default in /tmp. The pool of an unmodified script (spawn.standby_bootstrap): its process waits
// in the bootstrap and takes the next generation's rank without join-live. Real agent, real
// python3 processes on the real socket.

#include <doctest/doctest.h>

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "launcher/base/base64.h"
#include "tests/integration/dtrain_runner.h"
#include "tests/integration/support/agent_session.h"
#include "tests/integration/support/process_probe.h"

using dtrain::test::AgentSession;
using dtrain::test::spawn_message;
using nlohmann::json;

namespace {

// Both scripts below begin here: on the agent's socket; a standby (DTRAIN_STANDBY=1) says hello
// {standby}, prints "standby ready" and reads the assign (`assign`) into its environment.
const std::string kStandbyPrelude = R"(
import json, os, socket, time
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
)";

// Once assigned, a standby prints what it became and says the worker's hello. A worker started
// as one says hello at once. Both then print every line they receive.
const std::string kScript = kStandbyPrelude + R"(
if 'assign' in globals():
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

/// The run's processes started as standbys (DTRAIN_STANDBY=`kind`: "1", or "bootstrap" for a
/// pool of an unmodified script); /proc keeps the variable after an assign.
std::vector<pid_t> standbys(const AgentSession& session, const std::string& kind = "1") {
  std::vector<pid_t> of_run = dtrain::test::processes_of_run(session.run_id());
  std::vector<pid_t> found;
  for (pid_t pid : dtrain::test::processes_with_env("DTRAIN_STANDBY", kind)) {
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

namespace {

// A standby that, once assigned, plays PyTorch's flight recorder with the paths it was ASSIGNED
// (os.environ after the assign; its /proc/<pid>/environ still shows the standby's start-up
// environment, without them): it makes the debug-info fifo and answers a byte on it with a dump.
const std::string kDumpingStandby = kStandbyPrelude + R"(
rank = os.environ['RANK']
send({'type': 'hello', 'rank': int(rank), 'gen': int(os.environ['DTRAIN_GENERATION']), 'pid': os.getpid()})
pipe_path = os.environ['TORCH_NCCL_DEBUG_INFO_PIPE_FILE'] + rank + '.pipe'
os.mkfifo(pipe_path, 0o600)
pipe = os.open(pipe_path, os.O_RDONLY | os.O_NONBLOCK)
print('pipe ready', flush=True)
while True:
    time.sleep(0.02)
    try:
        data = os.read(pipe, 16)
    except BlockingIOError:
        data = b''
    if data:
        with open(os.environ['TORCH_FR_DUMP_TEMP_FILE'] + rank, 'wb') as dump:
            dump.write(b'real dump of promoted standby rank ' + rank.encode())
)";

// A file at PyTorch's default dump path, /tmp/nccl_trace_rank_<rank>, that any local user could
// have written; removed when the test ends. The rank is chosen from this test's pid so that
// parallel test processes do not meet at one name.
struct PlantedDump {
  std::string path;
  explicit PlantedDump(int rank) : path("/tmp/nccl_trace_rank_" + std::to_string(rank)) {
    int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    REQUIRE_MESSAGE(fd >= 0, path << " exists already (left by another run?)");
    const char planted[] = "planted by another user";
    REQUIRE(::write(fd, planted, sizeof planted - 1) == static_cast<ssize_t>(sizeof planted - 1));
    ::close(fd);
  }
  ~PlantedDump() { ::unlink(path.c_str()); }
};

}  // namespace

TEST_CASE("standby: a promoted standby's flight-recorder dump is found at its assigned path, never at /tmp's default") {
  if (::access("/usr/bin/python3", X_OK) != 0) std::exit(77);
  const int rank = 5000 + ::getpid() % 50000;
  PlantedDump planted(rank);
  AgentSession session(DTRAIN_EXE);
  REQUIRE(session.handshake());
  auto spawn = [&](int gen, int standby, const json& extra_env) {
    json message = spawn_message(gen, {rank}, {"/usr/bin/python3", "-c", kDumpingStandby}, session.run_id());
    message["workers"][0]["env"] = {{"RANK", std::to_string(rank)}};
    message["workers"][0]["env"].update(extra_env);
    message["standby"] = standby;
    return message;
  };
  session.send(spawn(0, 1, json::object()));
  REQUIRE(session.wait_for([](const json& m) { return m["type"] == "started" && m["gen"] == 0; }));
  pid_t standby = wait_ready_standby(session);
  REQUIRE(standby > 0);
  session.send({{"type", "kill"}, {"gen", 0}, {"signal", "KILL"}, {"grace_ms", 0}, {"ranks", {rank}}});
  REQUIRE(session.wait_for([](const json& m) { return m["type"] == "released" && m["gen"] == 0; }));

  session.send(spawn(1, 0, {{"DTRAIN_JOIN_LIVE", "1"}}));
  auto started = session.wait_for([](const json& m) { return m["type"] == "started" && m["gen"] == 1; });
  REQUIRE(started);
  REQUIRE((*started)["pid"] == standby);
  REQUIRE(session.wait_for([](const json& m) {
    return m["type"] == "log" && m["gen"] == 1 && m["line"] == "pipe ready";
  }));

  session.send({{"type", "dump"}, {"id", 41}, {"gen", 1}, {"timeout_ms", 10'000}});
  auto dump = session.wait_for([](const json& m) { return m["type"] == "dump" && m["id"] == 41; }, 20'000);
  REQUIRE(dump);
  CHECK((*dump)["rank"] == rank);
  CHECK((*dump)["pid"] == standby);
  CHECK_FALSE(dump->contains("error"));
  std::string data;
  REQUIRE(dtrain::base64_decode((*dump)["data"].get<std::string>(), data));
  CHECK(data == "real dump of promoted standby rank " + std::to_string(rank));
  CHECK(dtrain::testing::read_text(planted.path) == "planted by another user");  // neither read nor removed

  session.send({{"type", "kill"}, {"gen", -1}, {"signal", "KILL"}, {"grace_ms", 0}});
  REQUIRE(session.wait_for([](const json& m) { return m["type"] == "released" && m["gen"] == -1; }));
  session.connection().shutdown(5000);
  CHECK(dtrain::test::wait_until_run_gone(session.run_id(), 5000).empty());
}

namespace {

// An unmodified script for the pool (spawn.standby_bootstrap): no protocol of its own. It prints
// what it finds at its start, then fails of an uncaught exception in generation 1.
const std::string kPoolScript = R"(
import os, sys, time
print('script rank %s gen %s pid %d preloaded %s standby %s imports %s error_file %s' % (
    os.environ['RANK'], os.environ['DTRAIN_GENERATION'], os.getpid(), 'colorsys' in sys.modules,
    os.environ.get('DTRAIN_STANDBY'), os.environ.get('DTRAIN_STANDBY_IMPORTS'),
    os.environ.get('TORCHELASTIC_ERROR_FILE', '').endswith('/error-g%s-r%s.json' % (
        os.environ['DTRAIN_GENERATION'], os.environ['RANK']))), flush=True)
if os.environ['DTRAIN_GENERATION'] == '1':
    raise ValueError('failed in a process from the pool')
)";

json pool_spawn(const AgentSession& session, int gen) {
  json spawn = spawn_message(gen, {0}, {"/usr/bin/python3", "-c", kPoolScript}, session.run_id());
  spawn["workers"][0]["env"] = {{"RANK", "0"}};
  spawn["instrument"] = true;
  spawn["standby"] = 1;
  spawn["standby_bootstrap"] = {"colorsys"};
  return spawn;
}

std::vector<pid_t> pool_processes(const AgentSession& session) { return standbys(session, "bootstrap"); }

/// A pool process blocked reading its socket: its hello {standby} is sent (the bootstrap sends
/// it, then reads), so the agent has it once a ping sent after this is answered.
bool waits_for_assign(pid_t pid) {
  std::string syscall = dtrain::testing::read_text("/proc/" + std::to_string(pid) + "/syscall");
  return syscall.rfind("45 ", 0) == 0 || syscall.rfind("0 ", 0) == 0;  // recvfrom or read (x86-64)
}

}  // namespace

TEST_CASE("pool: an unmodified script's pool process waits in the bootstrap and takes the next generation's rank, error record included") {
  if (::access("/usr/bin/python3", X_OK) != 0) std::exit(77);
  AgentSession session(DTRAIN_EXE);
  REQUIRE(session.handshake());
  session.send(pool_spawn(session, 0));
  auto first = session.wait_for([](const json& m) { return m["type"] == "started" && m["gen"] == 0; });
  REQUIRE(first);
  CHECK_FALSE(first->contains("standby"));  // nothing was ready: a new process
  // Generation 0 ends (no live worker left to beat): the pool fills.
  REQUIRE(session.wait_for([](const json& m) { return m["type"] == "exit" && m["gen"] == 0; }));
  pid_t pool = 0;
  REQUIRE(pump_until(session, [&] {
    std::vector<pid_t> found = pool_processes(session);
    pool = found.size() == 1 && waits_for_assign(found[0]) ? found[0] : 0;
    return pool != 0;
  }));
  session.send({{"type", "ping"}, {"id", 7}, {"supervisor_time_ms", 0}});
  REQUIRE(session.wait_for([](const json& m) { return m["type"] == "pong"; }));

  // Generation 1, no join-live: its rank is the pool process.
  session.send(pool_spawn(session, 1));
  auto started = session.wait_for([](const json& m) { return m["type"] == "started" && m["gen"] == 1; });
  REQUIRE(started);
  CHECK((*started)["pid"] == pool);
  CHECK((*started)["standby"] == true);
  auto hello = session.wait_for([&](const json& m) {
    return m["type"] == "from_worker" && m["gen"] == 1 && m["rank"] == 0 && m["msg"]["type"] == "hello";
  });
  REQUIRE(hello);
  CHECK((*hello)["pid"] == pool);
  auto line = session.wait_for([](const json& m) {
    return m["type"] == "log" && m["gen"] == 1 && m["line"].get<std::string>().rfind("script", 0) == 0;
  });
  REQUIRE(line);
  CHECK((*line)["line"] == "script rank 0 gen 1 pid " + std::to_string(pool) +
                              " preloaded True standby None imports None error_file True");
  // Its uncaught exception is rank 0's record, read from generation 1's error file.
  auto exit = session.wait_for([](const json& m) { return m["type"] == "exit" && m["gen"] == 1; });
  REQUIRE(exit);
  CHECK((*exit)["pid"] == pool);
  CHECK((*exit)["code"] == 1);
  REQUIRE(exit->contains("error"));
  CHECK((*exit)["error"]["message"] == "failed in a process from the pool");
  CHECK((*exit)["error"]["type"] == "ValueError");

  session.send({{"type", "kill"}, {"gen", -1}, {"signal", "TERM"}, {"grace_ms", 2000}});
  REQUIRE(session.wait_for([](const json& m) { return m["type"] == "released" && m["gen"] == -1; }));
  CHECK(pool_processes(session).empty());
  session.connection().shutdown(5000);
  CHECK(session.decode_error() == "");
  CHECK(dtrain::test::wait_until_run_gone(session.run_id(), 5000).empty());
}
