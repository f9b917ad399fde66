// `dtrain agent` as the supervisor sees it: a real agent process over LocalTransport, real
// workers (/bin/sh), real exits and signals. Every test ends with no process of its run left.

#include <doctest/doctest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "tests/integration/support/agent_session.h"
#include "tests/integration/support/process_probe.h"

using dtrain::test::AgentSession;
using dtrain::test::spawn_message;
using nlohmann::json;

namespace {

// Log lines of one rank and stream, in order, from everything received so far.
std::vector<std::string> log_lines(const AgentSession& session, int rank, const std::string& stream) {
  std::vector<std::string> lines;
  for (const json& message : session.history()) {
    if (message["type"] == "log" && message["rank"] == rank && message["stream"] == stream) {
      lines.push_back(message["line"].get<std::string>());
    }
  }
  return lines;
}

std::optional<json> wait_exit(AgentSession& session, int rank) {
  return session.wait_for([rank](const json& m) { return m["type"] == "exit" && m["rank"] == rank; });
}

// Ends the session and proves that nothing of its run survives.
void finish(AgentSession& session, const std::vector<pid_t>& pids) {
  session.connection().shutdown(5000);
  CHECK(session.decode_error() == "");
  for (pid_t pid : pids) {
    CHECK_MESSAGE(dtrain::test::wait_until_gone(pid, 5000), dtrain::test::describe_process(pid));
  }
  std::vector<pid_t> left = dtrain::test::wait_until_run_gone(session.run_id(), 5000);
  CHECK_MESSAGE(left.empty(), "processes of the run survive: " << left.size());
}

std::string hex_decode(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) {
    out.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  }
  return out;
}

}  // namespace

TEST_CASE("hello answers config with host facts and the socket lives in a 0700 runtime dir") {
  AgentSession session(DTRAIN_EXE);
  auto hello = session.handshake();
  REQUIRE(hello);
  CHECK((*hello)["protocol"] == dtrain::proto::kProtocolVersion);
  CHECK((*hello)["host"] == "localhost");
  CHECK((*hello)["pid"] == session.agent_pid());
  const json& facts = (*hello)["facts"];
  CHECK(facts["hostname"].get<std::string>() != "");
  CHECK(facts["os"].get<std::string>().rfind("Linux ", 0) == 0);
  CHECK(facts["arch"].get<std::string>() != "");
  CHECK(facts["cpus"].get<int>() >= 1);
  CHECK(facts["memory_mb"].get<int64_t>() > 0);
  CHECK(facts["gpus"].is_array());
  std::string socket_path = (*hello)["socket"];
  CHECK(socket_path == session.runtime_dir() + "/localhost.sock");
  struct stat info{};
  REQUIRE(::stat(session.runtime_dir().c_str(), &info) == 0);
  CHECK((info.st_mode & 0777) == 0700);
  REQUIRE(::stat(socket_path.c_str(), &info) == 0);
  CHECK(S_ISSOCK(info.st_mode));

  auto beat = session.wait_for_type("beat", 5000);
  REQUIRE(beat);
  CHECK((*beat)["workers"].is_array());
  CHECK((*beat)["mem_available_mb"].get<int64_t>() > 0);

  session.send({{"type", "ping"}, {"id", 42}, {"supervisor_time_ms", 7}});
  auto pong = session.wait_for_type("pong");
  REQUIRE(pong);
  CHECK((*pong)["id"] == 42);
  CHECK((*pong)["agent_time_ms"].get<int64_t>() > 0);

  session.send({{"type", "reserve_port"}, {"id", 43}});
  auto port = session.wait_for_type("port");
  REQUIRE(port);
  CHECK((*port)["id"] == 43);
  CHECK((*port)["port"].get<int>() > 0);

  finish(session, {});
  CHECK(::access(socket_path.c_str(), F_OK) != 0);  // removed when the agent exits
  CHECK(::access(session.runtime_dir().c_str(), F_OK) != 0);
}

TEST_CASE("worker output arrives line by line with its rank and stream and all before the exit") {
  AgentSession session(DTRAIN_EXE);
  REQUIRE(session.handshake());
  json spawn = spawn_message(1, {0, 1}, {"/bin/sh", "-c",
      "if [ \"$RANK\" = 0 ]; then printf 'one\\ntwo\\n'; printf 'no newline'; "
      "else echo 'to stderr' >&2; echo \"local $LOCAL_RANK\"; fi"}, session.run_id());
  spawn["workers"][0]["env"] = {{"RANK", "0"}, {"LOCAL_RANK", "0"}};
  spawn["workers"][1]["env"] = {{"RANK", "1"}, {"LOCAL_RANK", "1"}};
  session.send(spawn);
  auto started0 = session.wait_for([](const json& m) { return m["type"] == "started" && m["rank"] == 0; });
  auto started1 = session.wait_for([](const json& m) { return m["type"] == "started" && m["rank"] == 1; });
  REQUIRE(started0);
  REQUIRE(started1);
  CHECK((*started1)["local_rank"] == 1);
  CHECK((*started1)["gen"] == 1);
  auto exit0 = wait_exit(session, 0);
  auto exit1 = wait_exit(session, 1);
  REQUIRE(exit0);
  REQUIRE(exit1);
  CHECK((*exit0)["code"] == 0);
  CHECK((*exit0)["pid"] == (*started0)["pid"]);
  CHECK(log_lines(session, 0, "stdout") == std::vector<std::string>{"one", "two", "no newline"});
  CHECK(log_lines(session, 0, "stderr").empty());
  CHECK(log_lines(session, 1, "stderr") == std::vector<std::string>{"to stderr"});
  CHECK(log_lines(session, 1, "stdout") == std::vector<std::string>{"local 1"});
  CHECK((*exit0)["tail"] == json({"one", "two", "no newline"}));

  // Ordering: no log line of a rank after its exit.
  for (int rank : {0, 1}) {
    bool exited = false;
    for (const json& message : session.history()) {
      // Not every message has a rank (the config reply): operator[] on a const json with a
      // missing key is undefined (an assertion in Debug builds).
      if (message.value("rank", -1) != rank) continue;
      if (message["type"] == "exit") exited = true;
      if (message["type"] == "log") CHECK_FALSE(exited);
    }
    CHECK(exited);
  }
  finish(session, {(*started0)["pid"].get<pid_t>(), (*started1)["pid"].get<pid_t>()});
}

TEST_CASE("a long line is split at 64 KiB and the exit tail keeps only the last lines") {
  AgentSession session(DTRAIN_EXE);
  REQUIRE(session.handshake());
  json spawn = spawn_message(2, {0}, {"/bin/sh", "-c",
      "i=0; while [ $i -lt 5 ]; do echo line$i; i=$((i+1)); done; "
      "head -c 70000 /dev/zero | tr '\\0' x; echo; exit 3"}, session.run_id());
  spawn["log_tail_lines"] = 2;
  session.send(spawn);
  auto started = session.wait_for_type("started");
  REQUIRE(started);
  auto exit = wait_exit(session, 0);
  REQUIRE(exit);
  CHECK((*exit)["code"] == 3);
  CHECK_FALSE((*exit).contains("signal"));
  CHECK((*exit)["killed_by_agent"] == false);
  std::vector<std::string> lines = log_lines(session, 0, "stdout");
  REQUIRE(lines.size() == 7);
  CHECK(lines[4] == "line4");
  CHECK(lines[5] == std::string(65536, 'x'));
  CHECK(lines[6] == std::string(70000 - 65536, 'x'));
  REQUIRE((*exit)["tail"].size() == 2);
  CHECK((*exit)["tail"][1] == lines[6]);
  finish(session, {(*started)["pid"].get<pid_t>()});
}

TEST_CASE("a worker killed by SIGKILL is reported with the signal's name") {
  AgentSession session(DTRAIN_EXE);
  REQUIRE(session.handshake());
  session.send(spawn_message(1, {5}, {"/bin/sh", "-c", "echo dying; kill -9 $$"}, session.run_id()));
  auto started = session.wait_for_type("started");
  REQUIRE(started);
  auto exit = wait_exit(session, 5);
  REQUIRE(exit);
  CHECK((*exit)["signal"] == 9);
  CHECK((*exit)["signal_name"] == "SIGKILL");
  CHECK_FALSE((*exit).contains("code"));
  CHECK((*exit)["killed_by_agent"] == false);
  CHECK((*exit)["tail"] == json({"dying"}));
  CHECK((*exit)["agent_time_ms"].get<int64_t>() > 0);
  finish(session, {(*started)["pid"].get<pid_t>()});
}

TEST_CASE("the environment holds the agent's and the spawn's and the worker's and DTRAIN_AGENT_SOCKET") {
  ::setenv("DTRAIN_AGENT_TEST_INHERITED", "from-agent", 1);  // the agent inherits the test's
  AgentSession session(DTRAIN_EXE);
  ::unsetenv("DTRAIN_AGENT_TEST_INHERITED");
  auto hello = session.handshake();
  REQUIRE(hello);
  json spawn = spawn_message(4, {3}, {"/usr/bin/env"}, session.run_id());
  spawn["env"]["COMMON"] = "c";
  spawn["env"]["OVERRIDDEN"] = "common";
  spawn["workers"][0]["env"] = {{"OVERRIDDEN", "worker"}, {"ONLY_RANK", "3"}};
  session.send(spawn);
  auto started = session.wait_for_type("started");
  REQUIRE(started);
  REQUIRE(wait_exit(session, 3));
  std::vector<std::string> lines = log_lines(session, 3, "stdout");
  auto has = [&](const std::string& entry) {
    return std::find(lines.begin(), lines.end(), entry) != lines.end();
  };
  CHECK(has("DTRAIN_AGENT_TEST_INHERITED=from-agent"));
  CHECK(has("COMMON=c"));
  CHECK(has("OVERRIDDEN=worker"));
  CHECK(has("ONLY_RANK=3"));
  CHECK(has("DTRAIN_RUN_ID=" + session.run_id()));
  CHECK(has("DTRAIN_GENERATION=4"));
  CHECK(has("DTRAIN_AGENT_SOCKET=" + (*hello)["socket"].get<std::string>()));
  finish(session, {(*started)["pid"].get<pid_t>()});
}

TEST_CASE("argv with spaces and quotes and $() and newlines arrives unchanged in the workdir") {
  AgentSession session(DTRAIN_EXE);
  REQUIRE(session.handshake());
  std::string marker = "/tmp/dtrain-agent-test-" + std::to_string(::getpid()) + "-injected";
  std::vector<std::string> arguments = {"two words", "it's \"quoted\"", "$(touch " + marker + ")",
                                        "line\nbreak", "", "`id`;|&*"};
  std::vector<std::string> argv = {"/bin/sh", "-c",
      "pwd; for a in \"$@\"; do printf '%s' \"$a\" | od -An -tx1 | tr -d ' \\n'; echo; done", "sh"};
  argv.insert(argv.end(), arguments.begin(), arguments.end());
  json spawn = spawn_message(1, {0}, argv, session.run_id());
  spawn["workdir"] = "/tmp";
  session.send(spawn);
  auto started = session.wait_for_type("started");
  REQUIRE(started);
  REQUIRE(wait_exit(session, 0));
  std::vector<std::string> lines = log_lines(session, 0, "stdout");
  REQUIRE(lines.size() == arguments.size() + 1);
  CHECK(lines[0] == "/tmp");
  for (size_t i = 0; i < arguments.size(); ++i) {
    CHECK(hex_decode(lines[i + 1]) == arguments[i]);
  }
  CHECK(::access(marker.c_str(), F_OK) != 0);  // nothing was evaluated by a shell
  finish(session, {(*started)["pid"].get<pid_t>()});
}

TEST_CASE("a command that cannot run or a missing workdir is spawn_failed and the agent carries on") {
  AgentSession session(DTRAIN_EXE);
  REQUIRE(session.handshake());
  session.send(spawn_message(1, {0}, {"dtrain-no-such-command"}, session.run_id()));
  auto failed = session.wait_for_type("spawn_failed");
  REQUIRE(failed);
  CHECK((*failed)["rank"] == 0);
  CHECK((*failed)["gen"] == 1);
  CHECK((*failed)["error"] == "worker.command[0] 'dtrain-no-such-command': No such file or directory");

  json spawn = spawn_message(1, {1}, {"/bin/true"}, session.run_id());
  spawn["workdir"] = "/nonexistent-dtrain-dir";
  session.send(spawn);
  auto bad_dir = session.wait_for_type("spawn_failed");
  REQUIRE(bad_dir);
  CHECK((*bad_dir)["error"] == "workdir '/nonexistent-dtrain-dir': No such file or directory");

  session.send(spawn_message(1, {2}, {"/bin/sh", "-c", "exec sleep 1000"}, session.run_id()));
  auto started = session.wait_for_type("started");
  REQUIRE(started);
  session.send(spawn_message(1, {2}, {"/bin/true"}, session.run_id()));
  auto duplicate = session.wait_for_type("spawn_failed");
  REQUIRE(duplicate);
  CHECK((*duplicate)["error"].get<std::string>().find("already running") != std::string::npos);

  CHECK_FALSE(session.wait_for_type("started", 200));  // the failures started nothing
  session.send({{"type", "ping"}, {"id", 1}});
  CHECK(session.wait_for_type("pong"));
  finish(session, {(*started)["pid"].get<pid_t>()});
}

TEST_CASE("GPUs and topology come from nvidia-smi when it is on PATH") {
  // A stand-in nvidia-smi with the output format of the real one (--format=csv,noheader).
  std::string directory = "/tmp/dtrain-agent-test-smi-" + std::to_string(::getpid());
  REQUIRE(::mkdir(directory.c_str(), 0700) == 0);
  std::string script = directory + "/nvidia-smi";
  {
    FILE* file = std::fopen(script.c_str(), "w");
    REQUIRE(file != nullptr);
    std::fputs("#!/bin/sh\n"
               "if [ \"$1\" = topo ]; then printf '\\tGPU0\\tGPU1\\nGPU0\\t X \\tNV18\\n'; exit 0; fi\n"
               "[ \"$1\" = --query-gpu=index,name,uuid ] || exit 9\n"
               "printf '0, NVIDIA H200, GPU-aaaa\\n1, NVIDIA H200, GPU-bbbb\\n'\n", file);
    std::fclose(file);
  }
  REQUIRE(::chmod(script.c_str(), 0700) == 0);
  std::string old_path = std::getenv("PATH") ? std::getenv("PATH") : "/usr/bin:/bin";
  ::setenv("PATH", (directory + ":" + old_path).c_str(), 1);
  AgentSession session(DTRAIN_EXE);
  ::setenv("PATH", old_path.c_str(), 1);
  auto hello = session.handshake();
  ::unlink(script.c_str());
  ::rmdir(directory.c_str());
  REQUIRE(hello);
  const json& facts = (*hello)["facts"];
  CHECK(facts["gpus"] == json::parse(R"([{"index":0,"name":"NVIDIA H200","uuid":"GPU-aaaa"},
                                         {"index":1,"name":"NVIDIA H200","uuid":"GPU-bbbb"}])"));
  REQUIRE(facts.contains("topology"));
  CHECK(facts["topology"].get<std::string>().find("NV18") != std::string::npos);
  finish(session, {});
}
