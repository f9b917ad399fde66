// The agent's side of an in-place recovery (issue 17): kill {ranks} ends only the named workers
// of a generation; gen_changed carries the survivors over to the next generation (reports,
// socket, held beats, error file) and tells them on their socket; the replacement is spawned
// into the new generation beside them. Real agent, real python3 workers on the real socket.

#include <doctest/doctest.h>

#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "launcher/base/fd.h"
#include "tests/integration/support/agent_session.h"
#include "tests/integration/support/process_probe.h"

using dtrain::test::AgentSession;
using dtrain::test::spawn_message;
using nlohmann::json;

namespace {

// A worker as the runtime would be, reduced to what the agent sees: it says hello with its RANK
// and DTRAIN_GENERATION, beats twice (with batch_beats the second is held), prints "ready", then
// prints every line it receives as "got <line>". On gen.changed it beats and asks the store for
// a key; on test.fail it leaves an error record where torch's @record would and exits 3. With
// LATE_FILE set it connects only once that file exists.
constexpr const char* kWorkerScript = R"(
import json, os, socket, sys, time
late = os.environ.get('LATE_FILE')
while late and not os.path.exists(late):
    time.sleep(0.02)
s = socket.socket(socket.AF_UNIX)
s.connect(os.environ['DTRAIN_AGENT_SOCKET'])
def send(m):
    s.sendall((json.dumps(m) + '\n').encode())
send({'type': 'hello', 'rank': int(os.environ['RANK']), 'gen': int(os.environ['DTRAIN_GENERATION']),
      'pid': os.getpid()})
send({'type': 'beat', 'step': 1})
send({'type': 'beat', 'step': 2})
print('ready', flush=True)
for line in s.makefile('r'):
    print('got ' + line.strip(), flush=True)
    message = json.loads(line)
    if message['type'] == 'gen.changed':
        send({'type': 'beat', 'step': 3})
        send({'type': 'kv.get', 'id': 1, 'key': 'state'})
    elif message['type'] == 'test.fail':
        with open(os.environ['TORCHELASTIC_ERROR_FILE'], 'w') as f:
            json.dump({'message': {'message': 'RuntimeError: lost after the recovery',
                                   'extraInfo': {'py_callstack': 'Traceback: in step', 'timestamp': '1700000000'}}}, f)
        sys.exit(3)
)";

json spawn_workers(const AgentSession& session, int gen, const std::vector<int>& ranks,
                   const json& extra_env = json::object()) {
  json spawn = spawn_message(gen, ranks, {"/usr/bin/python3", "-c", kWorkerScript}, session.run_id());
  for (size_t i = 0; i < ranks.size(); ++i) {
    spawn["workers"][i]["env"] = {{"RANK", std::to_string(ranks[i])}};
    spawn["workers"][i]["env"].update(extra_env);
  }
  return spawn;
}

pid_t wait_started(AgentSession& session, int gen, int rank) {
  auto started = session.wait_for([&](const json& m) {
    return m["type"] == "started" && m["gen"] == gen && m["rank"] == rank;
  });
  REQUIRE_MESSAGE(started, "no started for rank " << rank << " of generation " << gen);
  return (*started)["pid"].get<pid_t>();
}

std::optional<json> wait_log(AgentSession& session, int rank, const std::string& prefix, int timeout_ms = 20'000) {
  return session.wait_for([&](const json& m) {
    return m["type"] == "log" && m["rank"] == rank && m["line"].get<std::string>().rfind(prefix, 0) == 0;
  }, timeout_ms);
}

// The JSON line a worker printed as "got <line>".
json received(const json& log) { return json::parse(log["line"].get<std::string>().substr(4)); }

std::optional<json> wait_from_worker(AgentSession& session, int gen, int rank, const std::string& type) {
  return session.wait_for([&](const json& m) {
    return m["type"] == "from_worker" && m["gen"] == gen && m["rank"] == rank && m["msg"]["type"] == type;
  });
}

bool is_running(pid_t pid) {
  std::optional<char> state = dtrain::test::process_state(pid);
  return state && *state != 'Z';
}

size_t index_in_history(const AgentSession& session, const std::function<bool(const json&)>& predicate) {
  const auto& history = session.history();
  auto found = std::find_if(history.begin(), history.end(), predicate);
  return static_cast<size_t>(found - history.begin());
}

dtrain::UniqueFd connect_to(const std::string& path) {
  dtrain::UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  path.copy(address.sun_path, sizeof address.sun_path - 1);
  REQUIRE(::connect(fd.get(), reinterpret_cast<sockaddr*>(&address), sizeof address) == 0);
  return fd;
}

void finish(AgentSession& session, const std::vector<pid_t>& pids) {
  session.connection().shutdown(5000);
  CHECK(session.decode_error() == "");
  for (pid_t pid : pids) {
    CHECK_MESSAGE(dtrain::test::wait_until_gone(pid, 5000), dtrain::test::describe_process(pid));
  }
  std::vector<pid_t> left = dtrain::test::wait_until_run_gone(session.run_id(), 5000);
  CHECK_MESSAGE(left.empty(), "processes of the run survive: " << left.size());
}

}  // namespace

TEST_CASE("in-place recovery on one host: kill one rank, carry the survivors to the next generation, replace the rank") {
  if (::access("/usr/bin/python3", X_OK) != 0) std::exit(77);
  AgentSession session(DTRAIN_EXE);
  // A long agent beat interval: held worker beats leave only when something flushes them.
  auto hello = session.handshake({{"batch_beats", true}, {"heartbeat_interval_ms", 60'000},
                                  {"heartbeat_timeout_ms", 120'000}});
  REQUIRE(hello);
  char late_dir_template[] = "/tmp/dtrain-inplace-XXXXXX";
  REQUIRE(::mkdtemp(late_dir_template) != nullptr);
  std::string late_dir = late_dir_template;
  std::string late_file = late_dir + "/connect-now";

  session.send(spawn_workers(session, 0, {0, 1, 2}));
  session.send(spawn_workers(session, 0, {3}, {{"LATE_FILE", late_file}}));
  std::vector<pid_t> pids;
  for (int rank : {0, 1, 2, 3}) pids.push_back(wait_started(session, 0, rank));
  for (int rank : {0, 1, 2}) REQUIRE(wait_log(session, rank, "ready"));

  // Rank 0 hangs: the supervisor kills only it.
  session.send({{"type", "kill"}, {"gen", 0}, {"signal", "KILL"}, {"grace_ms", 0}, {"ranks", {0}}});
  auto exit0 = session.wait_for([](const json& m) { return m["type"] == "exit" && m["rank"] == 0; });
  REQUIRE(exit0);
  CHECK((*exit0)["gen"] == 0);
  CHECK((*exit0)["signal_name"] == "SIGKILL");
  CHECK((*exit0)["killed_by_agent"] == true);
  auto released0 = session.wait_for_type("released");
  REQUIRE(released0);
  CHECK((*released0)["gen"] == 0);
  CHECK((*released0)["ranks"] == json::array({0}));
  CHECK((*released0)["killed"] == json::array({pids[0]}));
  CHECK((*released0)["remaining"] == 0);
  for (int rank : {1, 2, 3}) CHECK_MESSAGE(is_running(pids[rank]), "rank " << rank << " must survive the kill of rank 0");

  session.send({{"type", "gen_changed"}, {"id", 7}, {"from", 0}, {"to", 1}});
  auto changed = session.wait_for_type("gen_changed");
  REQUIRE(changed);
  CHECK((*changed)["id"] == 7);
  CHECK((*changed)["from"] == 0);
  CHECK((*changed)["to"] == 1);
  // The survivors, the one not connected yet included (in the agent's order: compare sorted).
  std::vector<int> carried = (*changed)["ranks"].get<std::vector<int>>();
  std::vector<pid_t> carried_pids = (*changed)["pids"].get<std::vector<pid_t>>();
  std::vector<pid_t> survivors = {pids[1], pids[2], pids[3]};
  std::sort(carried.begin(), carried.end());
  std::sort(carried_pids.begin(), carried_pids.end());
  std::sort(survivors.begin(), survivors.end());
  CHECK(carried == std::vector<int>{1, 2, 3});
  CHECK(carried_pids == survivors);
  // Each survivor's held beat went out before the reply, still as generation 0.
  for (int rank : {1, 2}) {
    size_t held = index_in_history(session, [rank](const json& m) {
      return m["type"] == "from_worker" && m["rank"] == rank && m["msg"]["type"] == "beat" && m["msg"]["step"] == 2;
    });
    size_t reply = index_in_history(session, [](const json& m) { return m["type"] == "gen_changed"; });
    REQUIRE(held < session.history().size());
    CHECK(session.history()[held]["gen"] == 0);
    CHECK(held < reply);
  }

  // The survivors are told on their socket, and from then on speak as generation 1.
  for (int rank : {1, 2}) {
    CAPTURE(rank);
    auto told = wait_log(session, rank, "got ");
    REQUIRE(told);
    CHECK((*told)["gen"] == 1);  // its output too is generation 1's now
    CHECK(received(*told) == json({{"type", "gen.changed"}, {"gen", 1}}));
    auto beat = wait_from_worker(session, 1, rank, "beat");
    REQUIRE(beat);
    CHECK((*beat)["msg"]["step"] == 3);  // its first beat in generation 1 is not held
    CHECK(wait_from_worker(session, 1, rank, "kv.get"));
  }
  // The store's answer reaches the re-stamped worker under generation 1.
  json answer = {{"type", "kv.value"}, {"id", 1}, {"value", "v1"}};
  session.send({{"type", "to_worker"}, {"gen", 1}, {"rank", 1}, {"msg", answer}});
  auto answered = wait_log(session, 1, "got ");
  REQUIRE(answered);
  CHECK(received(*answered) == answer);

  // Another process saying hello as rank 1 of the old generation takes nothing from the worker.
  dtrain::UniqueFd impostor = connect_to((*hello)["socket"].get<std::string>());
  std::string impostor_hello = json({{"type", "hello"}, {"rank", 1}, {"gen", 0}, {"pid", ::getpid()}}).dump() + "\n";
  REQUIRE(::send(impostor.get(), impostor_hello.data(), impostor_hello.size(), MSG_NOSIGNAL) ==
          static_cast<ssize_t>(impostor_hello.size()));
  auto impostor_forwarded = session.wait_for([](const json& m) {
    return m["type"] == "from_worker" && m["msg"]["type"] == "hello" && m["pid"] == ::getpid();
  });
  REQUIRE(impostor_forwarded);
  CHECK((*impostor_forwarded)["gen"] == 0);
  json second = {{"type", "kv.value"}, {"id", 2}, {"value", "v2"}};
  session.send({{"type", "to_worker"}, {"gen", 1}, {"rank", 1}, {"msg", second}});
  auto second_answered = wait_log(session, 1, "got ");
  REQUIRE(second_answered);
  CHECK(received(*second_answered) == second);
  pollfd impostor_poll{impostor.get(), POLLIN, 0};
  CHECK(::poll(&impostor_poll, 1, 0) == 0);  // the agent wrote to the worker only, and before it printed

  // A worker that connects only now says hello as generation 0 (its environment): being the
  // carried-over worker itself, it is re-stamped and told.
  { std::ofstream touch(late_file); }
  auto late_hello = wait_from_worker(session, 1, 3, "hello");
  REQUIRE(late_hello);
  CHECK((*late_hello)["msg"]["gen"] == 0);
  auto late_told = wait_log(session, 3, "got ");
  REQUIRE(late_told);
  CHECK(received(*late_told) == json({{"type", "gen.changed"}, {"gen", 1}}));
  CHECK(wait_from_worker(session, 1, 3, "beat"));
  CHECK(wait_from_worker(session, 1, 3, "kv.get"));

  // The replacement joins generation 1; the survivors' ranks and the old generation take no one.
  session.send(spawn_workers(session, 1, {0}));
  pid_t replacement = wait_started(session, 1, 0);
  pids.push_back(replacement);
  CHECK(wait_from_worker(session, 1, 0, "hello"));
  session.send(spawn_workers(session, 1, {1}));
  auto duplicate = session.wait_for_type("spawn_failed");
  REQUIRE(duplicate);
  CHECK((*duplicate)["gen"] == 1);
  CHECK((*duplicate)["rank"] == 1);
  CHECK((*duplicate)["error"].get<std::string>().find("already running (pid " + std::to_string(pids[1]) + ")") !=
        std::string::npos);
  session.send(spawn_workers(session, 0, {0}));
  auto stale = session.wait_for_type("spawn_failed");
  REQUIRE(stale);
  CHECK((*stale)["gen"] == 0);
  CHECK((*stale)["error"].get<std::string>().find("carried over to generation 1") != std::string::npos);

  // A survivor that fails after the recovery is reported as generation 1, with its error record
  // (the file its environment named at spawn, under generation 0).
  session.send({{"type", "to_worker"}, {"gen", 1}, {"rank", 2}, {"msg", {{"type", "test.fail"}}}});
  auto exit2 = session.wait_for([](const json& m) { return m["type"] == "exit" && m["rank"] == 2; });
  REQUIRE(exit2);
  CHECK((*exit2)["gen"] == 1);
  CHECK((*exit2)["code"] == 3);
  CHECK((*exit2)["killed_by_agent"] == false);
  REQUIRE(exit2->contains("error"));
  CHECK((*exit2)["error"]["type"] == "RuntimeError");
  CHECK((*exit2)["error"]["message"] == "lost after the recovery");
  CHECK((*exit2)["error"]["traceback"] == "Traceback: in step");

  // Generation 1 ends as one: survivors and replacement alike.
  session.send({{"type", "kill"}, {"gen", 1}, {"signal", "TERM"}, {"grace_ms", 5000}});
  std::vector<int> ended;
  for (int i = 0; i < 3; ++i) {
    auto exit = session.wait_for([](const json& m) { return m["type"] == "exit" && m["gen"] == 1 && m["rank"] != 2; });
    REQUIRE(exit);
    CHECK((*exit)["killed_by_agent"] == true);
    ended.push_back((*exit)["rank"].get<int>());
  }
  std::sort(ended.begin(), ended.end());
  CHECK(ended == std::vector<int>{0, 1, 3});
  auto released1 = session.wait_for_type("released");
  REQUIRE(released1);
  CHECK((*released1)["gen"] == 1);
  CHECK_FALSE(released1->contains("ranks"));
  std::vector<pid_t> killed = (*released1)["killed"].get<std::vector<pid_t>>();
  for (pid_t pid : {pids[1], pids[3], replacement}) {
    CHECK_MESSAGE(std::count(killed.begin(), killed.end(), pid) == 1, "pid " << pid << " not in released.killed");
  }
  CHECK((*released1)["remaining"] == 0);
  CHECK(dtrain::test::wait_until_all_gone(pids, 0).empty());

  ::unlink(late_file.c_str());
  ::rmdir(late_dir.c_str());
  finish(session, pids);
}

TEST_CASE("kill {ranks} also ends those ranks' daemonised children and orphans, and only theirs - a carried-over rank's orphan dies with its new generation") {
  AgentSession session(DTRAIN_EXE);
  REQUIRE(session.handshake());
  // Each rank: a child in its own session (found through its parent, the worker) and an orphan
  // (its parent exits at once: the agent, a child subreaper, adopts it; found by its environment).
  // Each says its pid once in its own session, so that no kill of the worker's group reaches it;
  // "ready" comes after its parent exited.
  json spawn = spawn_message(0, {0, 1},
                             {"/bin/sh", "-c",
                              "setsid sh -c 'echo child $$; exec sleep 1000' & "
                              "(setsid sh -c 'echo orphan $$; exec sleep 1000' &); echo ready; exec sleep 1000"},
                             session.run_id());
  for (int rank : {0, 1}) spawn["workers"][rank]["env"] = {{"RANK", std::to_string(rank)}};
  session.send(spawn);
  std::vector<pid_t> workers, children, orphans;
  for (int rank : {0, 1}) {
    workers.push_back(wait_started(session, 0, rank));
    auto child = wait_log(session, rank, "child ");
    auto orphan = wait_log(session, rank, "orphan ");
    REQUIRE(child);
    REQUIRE(orphan);
    REQUIRE(wait_log(session, rank, "ready"));
    children.push_back(std::stoi((*child)["line"].get<std::string>().substr(6)));
    orphans.push_back(std::stoi((*orphan)["line"].get<std::string>().substr(7)));
  }

  session.send({{"type", "kill"}, {"gen", 0}, {"signal", "KILL"}, {"grace_ms", 0}, {"ranks", {0}}});
  auto released = session.wait_for_type("released");
  REQUIRE(released);
  CHECK((*released)["ranks"] == json::array({0}));
  std::vector<pid_t> killed = (*released)["killed"].get<std::vector<pid_t>>();
  std::sort(killed.begin(), killed.end());
  std::vector<pid_t> rank0 = {workers[0], children[0], orphans[0]};
  std::sort(rank0.begin(), rank0.end());
  CHECK_MESSAGE(killed == rank0, "released " << released->dump() << ", rank 0: " << json(rank0).dump());
  CHECK(dtrain::test::wait_until_all_gone(rank0, 0).empty());  // released means gone
  for (pid_t pid : {workers[1], children[1], orphans[1]}) CHECK_MESSAGE(is_running(pid), dtrain::test::describe_process(pid));

  session.send({{"type", "gen_changed"}, {"id", 7}, {"from", 0}, {"to", 1}});
  auto changed = session.wait_for_type("gen_changed");
  REQUIRE(changed);
  CHECK((*changed)["id"] == 7);
  CHECK((*changed)["ranks"] == json::array({1}));
  CHECK((*changed)["pids"] == json::array({workers[1]}));

  // The orphan's environment still says generation 0; it belongs to generation 1 now.
  session.send({{"type", "kill"}, {"gen", 1}, {"signal", "KILL"}, {"grace_ms", 0}});
  auto exit1 = session.wait_for([](const json& m) { return m["type"] == "exit" && m["rank"] == 1; });
  REQUIRE(exit1);
  CHECK((*exit1)["gen"] == 1);
  auto released1 = session.wait_for_type("released");
  REQUIRE(released1);
  CHECK((*released1)["gen"] == 1);
  std::vector<pid_t> killed1 = (*released1)["killed"].get<std::vector<pid_t>>();
  std::sort(killed1.begin(), killed1.end());
  std::vector<pid_t> rank1 = {workers[1], children[1], orphans[1]};
  std::sort(rank1.begin(), rank1.end());
  CHECK_MESSAGE(killed1 == rank1, "released " << released1->dump() << ", rank 1: " << json(rank1).dump());
  CHECK(dtrain::test::wait_until_all_gone(rank1, 0).empty());
  std::vector<pid_t> all = rank0;
  all.insert(all.end(), rank1.begin(), rank1.end());
  finish(session, all);
}

TEST_CASE("bad gen_changed and kill.ranks fields are protocol errors: error, fence, workers gone") {
  struct Case {
    const char* name;
    json frame;
    const char* expected;
  };
  std::vector<Case> cases = {
      {"to not after from", {{"type", "gen_changed"}, {"id", 1}, {"from", 2}, {"to", 2}},
       "gen_changed: 'to' must be greater than 'from', got from 2 to 2"},
      {"no id", {{"type", "gen_changed"}, {"from", 0}, {"to", 1}}, "gen_changed.id: missing (expected an integer)"},
      {"ranks of strings", {{"type", "kill"}, {"gen", 0}, {"signal", "KILL"}, {"ranks", {"0"}}},
       "kill.ranks: expected a non-empty array of integers"},
      {"ranks not an array", {{"type", "kill"}, {"gen", 0}, {"signal", "KILL"}, {"ranks", 0}},
       "kill.ranks: expected a non-empty array of integers"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.name);
    AgentSession session(DTRAIN_EXE);
    REQUIRE(session.handshake());
    session.send(spawn_message(0, {0}, {"/bin/sh", "-c", "exec sleep 1000"}, session.run_id()));
    pid_t worker = wait_started(session, 0, 0);
    session.send(c.frame);
    auto error = session.wait_for_type("error");
    REQUIRE(error);
    CHECK((*error)["message"].get<std::string>().find(c.expected) != std::string::npos);
    CHECK_FALSE(error->contains("about"));  // a protocol error, not a failed request
    REQUIRE(session.wait_for_type("bye", 15'000));
    REQUIRE(session.wait_closed());
    CHECK(session.connection().close_reason() == "agent exited with code 3");
    CHECK(dtrain::test::wait_until_gone(worker, 5000));
    CHECK(dtrain::test::wait_until_run_gone(session.run_id(), 5000).empty());
  }
}
