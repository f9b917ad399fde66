// The worker protocol socket: a worker's hello and every later line reach the supervisor as
// from_worker; to_worker replies reach the worker; a misbehaving worker loses only its own
// connection. The "worker" here is this test process, connected with a tiny client.

#include <doctest/doctest.h>

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "launcher/base/fd.h"
#include "worker/contract/wire.h"
#include "tests/integration/support/agent_session.h"
#include "tests/integration/support/process_probe.h"

using dtrain::test::AgentSession;
using dtrain::test::spawn_message;
using nlohmann::json;

namespace {

dtrain::UniqueFd connect_to(const std::string& path) {
  dtrain::UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  path.copy(address.sun_path, sizeof address.sun_path - 1);
  REQUIRE(::connect(fd.get(), reinterpret_cast<sockaddr*>(&address), sizeof address) == 0);
  return fd;
}

// MSG_NOSIGNAL: the agent may close the connection first, and that must not kill the test.
bool send_all(int fd, std::string bytes) {
  while (!bytes.empty()) {
    ssize_t sent = ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (sent <= 0) return false;
    bytes.erase(0, static_cast<size_t>(sent));
  }
  return true;
}

void send_line(int fd, const std::string& line) { REQUIRE(send_all(fd, line + "\n")); }

// One line from the agent, or "" at EOF / after the timeout; "EOF" when the agent closed it.
std::string read_line(int fd, int timeout_ms = 10'000) {
  std::string line;
  char c;
  for (;;) {
    pollfd entry{fd, POLLIN, 0};
    if (::poll(&entry, 1, timeout_ms) <= 0) return line;
    ssize_t got = ::read(fd, &c, 1);
    if (got <= 0) return line.empty() ? "EOF" : line;
    if (c == '\n') return line;
    line += c;
  }
}

}  // namespace

TEST_CASE("hello and beats are forwarded as from_worker and to_worker reaches the worker") {
  AgentSession session(DTRAIN_EXE);
  auto hello = session.handshake();
  REQUIRE(hello);
  // A real worker learns the socket from its environment.
  session.send(spawn_message(3, {0}, {"/bin/sh", "-c", "echo \"$DTRAIN_AGENT_SOCKET\"; exec sleep 1000"},
                             session.run_id()));
  auto started = session.wait_for_type("started");
  REQUIRE(started);
  auto path_line = session.wait_for_type("log");
  REQUIRE(path_line);
  std::string path = (*path_line)["line"];
  CHECK(path == (*hello)["socket"]);

  dtrain::UniqueFd worker = connect_to(path);
  send_line(worker.get(), json({{"type", "hello"}, {"rank", 0}, {"gen", 3}, {"pid", ::getpid()}}).dump());
  auto forwarded = session.wait_for_type("from_worker");
  REQUIRE(forwarded);
  CHECK((*forwarded)["gen"] == 3);
  CHECK((*forwarded)["rank"] == 0);
  CHECK((*forwarded)["pid"] == ::getpid());
  CHECK((*forwarded)["msg"]["type"] == "hello");

  send_line(worker.get(), json({{"type", "beat"}, {"step", 17}, {"loss", 0.5}}).dump());
  auto beat = session.wait_for_type("from_worker");
  REQUIRE(beat);
  CHECK((*beat)["msg"] == json({{"type", "beat"}, {"step", 17}, {"loss", 0.5}}));

  json reply = {{"type", "kv.value"}, {"id", 5}, {"value", "abc"}};
  session.send({{"type", "to_worker"}, {"gen", 3}, {"rank", 0}, {"msg", reply}});
  CHECK(json::parse(read_line(worker.get())) == reply);

  // A reply for a worker that never connected is an error, not a crash.
  session.send({{"type", "to_worker"}, {"gen", 3}, {"rank", 9}, {"msg", reply}});
  auto error = session.wait_for_type("error");
  REQUIRE(error);
  CHECK((*error)["about"] == "to_worker");
  CHECK((*error)["rank"] == 9);

  session.connection().shutdown(5000);
  CHECK(read_line(worker.get()) == "EOF");  // the agent closed the socket on its way out
  CHECK(dtrain::test::wait_until_gone((*started)["pid"].get<pid_t>(), 5000));
  CHECK(dtrain::test::wait_until_run_gone(session.run_id(), 5000).empty());
}

TEST_CASE("garbage is reported and dropped — an oversized line or a missing hello closes that connection only") {
  AgentSession session(DTRAIN_EXE);
  auto hello = session.handshake();
  REQUIRE(hello);
  std::string path = (*hello)["socket"];

  dtrain::UniqueFd no_hello = connect_to(path);
  send_line(no_hello.get(), json({{"type", "beat"}, {"step", 1}}).dump());
  CHECK(read_line(no_hello.get()) == "EOF");
  auto unnamed = session.wait_for_type("protocol_error");
  REQUIRE(unnamed);
  CHECK((*unnamed)["closed"] == true);
  CHECK_FALSE(unnamed->contains("rank"));  // no hello: nobody to name but the pid
  CHECK((*unnamed)["pid"].get<int>() == ::getpid());

  dtrain::UniqueFd garbage = connect_to(path);
  send_line(garbage.get(), json({{"type", "hello"}, {"rank", 1}, {"gen", 1}, {"pid", 1}}).dump());
  REQUIRE(session.wait_for_type("from_worker"));
  send_line(garbage.get(), "this is not json {");
  auto reported = session.wait_for([](const json& m) { return m["type"] == "protocol_error" && m.contains("rank"); });
  REQUIRE(reported);
  CHECK((*reported)["rank"] == 1);
  CHECK((*reported)["gen"] == 1);
  CHECK((*reported)["closed"] == false);
  CHECK((*reported)["error"] == "malformed JSON line 'this is not json {'");
  // A wrongly typed request is answered at once with the error (nothing is forwarded), and the
  // connection goes on working: the next good message is forwarded.
  send_line(garbage.get(), json({{"type", "kv.get"}, {"id", 7}, {"key", 5}}).dump());
  json refused = json::parse(read_line(garbage.get()));
  CHECK(refused["type"] == "error");
  CHECK(refused["id"] == 7);
  CHECK(refused["error"] == "kv.get.key: expected a string, got 5");
  send_line(garbage.get(), json({{"type", "beat"}, {"step", 3}}).dump());
  auto beat = session.wait_for([](const json& m) { return m["type"] == "from_worker" && m["rank"] == 1 && m["msg"]["type"] == "beat"; });
  REQUIRE(beat);
  CHECK((*beat)["msg"]["step"] == 3);

  dtrain::UniqueFd huge = connect_to(path);
  std::string line(dtrain::contract::wire::kMaxLineBytes + 10, 'x');
  send_all(huge.get(), line);  // the agent may close before it has all of it
  CHECK(read_line(huge.get()) == "EOF");

  // The agent is fine and a good worker still gets through.
  dtrain::UniqueFd good = connect_to(path);
  send_line(good.get(), json({{"type", "hello"}, {"rank", 2}, {"gen", 1}, {"pid", 2}}).dump());
  auto forwarded = session.wait_for([](const json& m) { return m["type"] == "from_worker" && m["rank"] == 2; });
  CHECK(forwarded);
  session.send({{"type", "ping"}, {"id", 1}});
  CHECK(session.wait_for_type("pong"));
  const std::string& diagnostics = session.diagnostics();
  CHECK(diagnostics.find("the first line must be hello") != std::string::npos);
  CHECK(diagnostics.find("exceeds the 1048576-byte limit") != std::string::npos);
}

TEST_CASE("batch_beats: a worker's first beat goes at once, later ones ride on the agent's beat, the last before its exit") {
  AgentSession session(DTRAIN_EXE);
  auto hello = session.handshake({{"batch_beats", true}, {"heartbeat_interval_ms", 200}});
  REQUIRE(hello);
  // The worker's own process connects (so the agent sees its pid), beats 1..6 quickly, says
  // ckpt.committed, beats 7, and exits.
  std::string script =
      "import json, os, socket, time\n"
      "s = socket.socket(socket.AF_UNIX); s.connect(os.environ['DTRAIN_AGENT_SOCKET'])\n"
      "def send(m): s.sendall((json.dumps(m) + '\\n').encode())\n"
      "send({'type': 'hello', 'rank': 0, 'gen': 2, 'pid': os.getpid()})\n"
      "for step in range(1, 7):\n"
      "    send({'type': 'beat', 'step': step}); time.sleep(0.1)\n"
      "send({'type': 'ckpt.committed', 'step': 6, 'bytes': 1, 'ms': 1})\n"
      "send({'type': 'beat', 'step': 7}); time.sleep(0.05)\n";
  session.send(spawn_message(2, {0}, {"/usr/bin/python3", "-c", script}, session.run_id()));
  REQUIRE(session.wait_for_type("exit", 20'000));
  // The worker's steps in the order the supervisor sees them: from_worker beats, and beats
  // inside the agent's beat frames.
  std::vector<int> steps;
  int first_beat_frame = -1, exit_frame = -1, committed_frame = -1, batched = 0;
  const auto& history = session.history();
  for (size_t i = 0; i < history.size(); ++i) {
    const json& message = history[i];
    if (message["type"] == "from_worker" && message["msg"]["type"] == "beat") {
      steps.push_back(message["msg"]["step"]);
      if (first_beat_frame < 0) first_beat_frame = static_cast<int>(i);
    } else if (message["type"] == "from_worker" && message["msg"]["type"] == "ckpt.committed") {
      committed_frame = static_cast<int>(i);
      CHECK(steps.back() == 6);  // the held beat 6 was flushed before it
    } else if (message["type"] == "beat" && message.contains("worker_beats")) {
      for (const json& held : message["worker_beats"]) {
        CHECK(held["gen"] == 2);
        CHECK(held["msg"]["type"] == "beat");
        steps.push_back(held["msg"]["step"]);
        ++batched;
      }
    } else if (message["type"] == "exit") {
      exit_frame = static_cast<int>(i);
    }
  }
  INFO("steps as seen: " << json(steps).dump());
  REQUIRE(!steps.empty());
  CHECK(steps.front() == 1);
  CHECK(history[static_cast<size_t>(first_beat_frame)]["msg"]["step"] == 1);  // the first at once
  CHECK(batched >= 1);                                  // later ones rode on agent beats
  CHECK(std::is_sorted(steps.begin(), steps.end()));    // order kept
  CHECK(steps.back() == 7);                             // the last beat arrived
  CHECK(committed_frame > 0);
  CHECK(exit_frame > committed_frame);
}

TEST_CASE("a worker's last beat, written just before it exits, reaches the supervisor before its exit") {
  // The agent reads its signals before its sockets in a round; without draining the dead
  // worker's connection first, a final beat came after the exit, when the run had already
  // ended (and a recovery's completion was never recorded). No sleep before the exit here.
  AgentSession session(DTRAIN_EXE);
  auto hello = session.handshake({{"batch_beats", true}, {"heartbeat_interval_ms", 200}});
  REQUIRE(hello);
  std::string script =
      "import json, os, socket\n"
      "s = socket.socket(socket.AF_UNIX); s.connect(os.environ['DTRAIN_AGENT_SOCKET'])\n"
      "rank = int(os.environ['RANK'])\n"
      "s.sendall((json.dumps({'type': 'hello', 'rank': rank, 'gen': 3, 'pid': os.getpid()}) + '\\n' +\n"
      "           json.dumps({'type': 'beat', 'step': 1}) + '\\n' +\n"
      "           json.dumps({'type': 'beat', 'step': 300}) + '\\n').encode())\n"
      "os._exit(0)\n";
  const std::vector<int> ranks{0, 1, 2, 3, 4, 5, 6, 7};
  json spawn = spawn_message(3, ranks, {"/usr/bin/python3", "-c", script}, session.run_id());
  for (json& worker : spawn["workers"]) worker["env"] = {{"RANK", std::to_string(worker["rank"].get<int>())}};
  session.send(spawn);
  std::map<int, int> last_step;  // rank → newest step seen so far
  std::map<int, int> step_at_exit;
  int exits = 0;
  for (size_t seen = 0; exits < static_cast<int>(ranks.size());) {
    REQUIRE(session.wait_for_type("exit", 20'000));
    const auto& history = session.history();
    for (; seen < history.size(); ++seen) {
      const json& message = history[seen];
      if (message["type"] == "from_worker" && message["msg"]["type"] == "beat") {
        last_step[message["rank"].get<int>()] = message["msg"]["step"].get<int>();
      } else if (message["type"] == "beat" && message.contains("worker_beats")) {
        for (const json& held : message["worker_beats"]) last_step[held["rank"].get<int>()] = held["msg"]["step"].get<int>();
      } else if (message["type"] == "exit") {
        int rank = message["rank"].get<int>();
        step_at_exit[rank] = last_step.count(rank) ? last_step[rank] : -1;
        ++exits;
      }
    }
  }
  std::string frames;
  for (const json& message : session.history()) frames += message.dump().substr(0, 300) + "\n";
  for (int rank : ranks) {
    INFO("rank " << rank << "; the agent's frames:\n" << frames);
    CHECK(step_at_exit[rank] == 300);
  }
}
