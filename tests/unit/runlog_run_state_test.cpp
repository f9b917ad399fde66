#include <doctest/doctest.h>

#include <filesystem>
#include <limits>
#include <string>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

#include "launcher/base/fd.h"
#include "launcher/runlog/control_client.h"
#include "launcher/runlog/run_state.h"
#include "launcher/runlog/state_writer.h"

using namespace dtrain;
using nlohmann::json;

namespace {

struct TempDir {
  std::string path;
  TempDir() {
    char pattern[] = "/tmp/dtrain-state-test-XXXXXX";
    path = ::mkdtemp(pattern);
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path, ignored);
  }
};

std::string this_host() {
  char name[256] = {};
  ::gethostname(name, sizeof name - 1);
  return name;
}

json supervisor_of(int64_t pid, int64_t ticks) {
  return {{"pid", pid}, {"hostname", this_host()}, {"started_at_ms", 1}, {"proc_start_ticks", ticks}};
}

// A pid that surely belonged to a process that is gone: a child that exited and was reaped.
pid_t dead_pid() {
  pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  REQUIRE(child > 0);
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  return child;
}

// A one-shot unix socket server: accepts one connection, reads one line, answers `reply`.
class TinyServer {
 public:
  TinyServer(const std::string& path, std::string reply) : reply_(std::move(reply)) {
    listener_.reset(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    REQUIRE(listener_.valid());
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    REQUIRE(path.size() < sizeof address.sun_path);
    std::copy(path.begin(), path.end(), address.sun_path);
    REQUIRE(::bind(listener_.get(), reinterpret_cast<sockaddr*>(&address), sizeof address) == 0);
    REQUIRE(::listen(listener_.get(), 1) == 0);
    thread_ = std::thread([this] {
      UniqueFd connection(::accept(listener_.get(), nullptr, nullptr));
      if (!connection.valid()) return;
      std::string in;
      while (in.find('\n') == std::string::npos) {
        Result<size_t> got = read_some(connection.get(), in);
        if (!got || *got == 0) break;
      }
      received_ = in;
      if (!reply_.empty()) (void)write_all(connection.get(), reply_);
    });
  }
  ~TinyServer() {
    if (thread_.joinable()) thread_.join();
  }
  /// What the client sent; waits for the connection to be served.
  std::string received() {
    if (thread_.joinable()) thread_.join();
    return received_;
  }

 private:
  UniqueFd listener_;
  std::string reply_;
  std::string received_;
  std::thread thread_;
};

}  // namespace

TEST_CASE("state.json is written atomically and read back with its version checked") {
  TempDir dir;
  RunDirectory run = RunDirectory::at(dir.path, "r");
  CHECK_FALSE(read_state(run).ok());  // not written yet
  REQUIRE(write_state(run, {{"run_id", "r"}, {"state", "running"}, {"generation", 2}}).ok());
  Result<json> state = read_state(run);
  REQUIRE(state.ok());
  CHECK((*state)["version"] == 1);
  CHECK((*state)["generation"] == 2);
  // No temp file is left beside it.
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir.path)) {
    (void)entry;
    ++files;
  }
  CHECK(files == 1);

  REQUIRE(write_state(run, {{"version", 9}, {"state", "running"}}).ok());
  Result<json> newer = read_state(run);
  REQUIRE_FALSE(newer.ok());
  CHECK(newer.error().message.find("version 9") != std::string::npos);

  REQUIRE(write_file_atomic(run.state_path(), "[1,2").ok());
  Result<json> broken = read_state(run);
  REQUIRE_FALSE(broken.ok());
  CHECK(broken.error().message.find(run.state_path()) != std::string::npos);
  CHECK_FALSE(write_state(run, json::array()).ok());
}

TEST_CASE("supervisor_alive: this process yes, a dead pid or a reused pid no") {
  json state = {{"state", "running"}};
  CHECK_FALSE(supervisor_alive(state));  // no supervisor recorded

  state["supervisor"] = supervisor_of(::getpid(), current_process_start_ticks());
  CHECK(current_process_start_ticks() > 0);
  CHECK(supervisor_alive(state));
  CHECK(display_state(state, true) == "running");

  state["supervisor"] = supervisor_of(dead_pid(), current_process_start_ticks());
  CHECK_FALSE(supervisor_alive(state));
  CHECK(display_state(state, false) == "supervisor gone");

  // Same pid, different start time: the pid was reused by an unrelated process.
  state["supervisor"] = supervisor_of(::getpid(), current_process_start_ticks() + 1);
  CHECK_FALSE(supervisor_alive(state));

  // A finished run whose supervisor has exited is simply finished.
  state["state"] = "failed";
  CHECK(display_state(state, false) == "failed");
  CHECK(is_terminal_state("stopped"));
  CHECK_FALSE(is_terminal_state("stopping"));
}

TEST_CASE("send_control writes one JSON line and returns the reply via the ctl.sock link") {
  TempDir dir;
  RunDirectory run = RunDirectory::at(dir.path, "r");
  std::string socket_path = dir.path + "/real.sock";
  REQUIRE(::symlink(socket_path.c_str(), run.ctl_link_path().c_str()) == 0);
  CHECK(control_socket_path(run).value() == socket_path);

  {
    TinyServer server(socket_path, "{\"type\":\"ok\",\"state\":\"stopping\"}\n");
    Result<ControlReply> reply = send_control(run, ControlRequest{ControlRequestType::stop}, Millis(5000));
    REQUIRE(reply.ok());
    CHECK(reply->state == "stopping");
    CHECK(server.received() == "{\"type\":\"stop\"}\n");
  }
  ::unlink(socket_path.c_str());
  {
    TinyServer server(socket_path, "{\"type\":\"error\",\"message\":\"already stopping\"}\n");
    Result<ControlReply> reply = send_control(run, ControlRequest{ControlRequestType::stop}, Millis(5000));
    REQUIRE_FALSE(reply.ok());
    CHECK(reply.error().message == "already stopping");
  }
  ::unlink(socket_path.c_str());
  {
    // What a supervisor before this fix answered: the reason in "error". It must reach the user.
    TinyServer server(socket_path, "{\"type\":\"error\",\"error\":\"unknown request 'x'\"}\n");
    Result<ControlReply> reply = send_control(run, ControlRequest{ControlRequestType::stop}, Millis(5000));
    REQUIRE_FALSE(reply.ok());
    CHECK(reply.error().message == "unknown request 'x'");
  }
  ::unlink(socket_path.c_str());
  {
    TinyServer server(socket_path, "");  // hangs up without answering
    Result<ControlReply> reply = send_control(run, ControlRequest{ControlRequestType::stop}, Millis(5000));
    REQUIRE_FALSE(reply.ok());
    CHECK(reply.error().message.find("without a reply") != std::string::npos);
  }
  ::unlink(socket_path.c_str());
  // Nobody listening: an error naming the socket, quickly.
  Result<ControlReply> refused = send_control(run, ControlRequest{ControlRequestType::stop}, Millis(5000));
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.error().message.find(socket_path) != std::string::npos);

  ::unlink(run.ctl_link_path().c_str());
  Result<ControlReply> no_link = send_control(run, ControlRequest{ControlRequestType::stop}, Millis(5000));
  REQUIRE_FALSE(no_link.ok());
  CHECK(no_link.error().message.find("ctl.sock") != std::string::npos);
}

TEST_CASE("send_control gives up at its deadline when the supervisor never answers") {
  TempDir dir;
  std::string socket_path = dir.path + "/silent.sock";
  UniqueFd listener(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::copy(socket_path.begin(), socket_path.end(), address.sun_path);
  REQUIRE(::bind(listener.get(), reinterpret_cast<sockaddr*>(&address), sizeof address) == 0);
  REQUIRE(::listen(listener.get(), 1) == 0);  // the kernel accepts; nobody ever replies
  Result<ControlReply> reply = send_control_to(socket_path, ControlRequest{ControlRequestType::stop}, Millis(200));
  REQUIRE_FALSE(reply.ok());
  CHECK(reply.error().message.find("no reply") != std::string::npos);
}

TEST_CASE("state.json from rank rows reads back as the schema: nulls, exits, non-finite numbers") {
  StateRankRow started;
  started.rank = 0;
  started.host = "gpu\"01";  // escaped, not broken
  started.local_rank = 0;
  started.dp = 0;
  started.pid = 4242;
  started.state = "running";
  started.step = 17;
  started.last_beat_ms = 1700000000123;
  started.loss = 0.1;
  started.step_ms = 250.5;
  StateRankRow killed;
  killed.rank = 1;
  killed.host = "gpu02";
  killed.local_rank = 1;
  killed.dp = 1;
  killed.state = "exited";
  killed.pid = 77;
  killed.exit_signal = "SIGKILL";
  killed.loss = std::numeric_limits<double>::quiet_NaN();
  StateRankRow pending;
  pending.rank = 2;
  pending.host = "gpu\\03\xc3\xbc\t";  // backslash, UTF-8, control character
  pending.state = "pending";
  pending.exit_code = 3;

  json head = {{"run_id", "r1"}, {"state", "running"}, {"ranks", json::array({1, 2})}};
  json parsed = json::parse(state_json_text(head, {started, killed, pending}));
  CHECK(parsed["version"] == kRunStateVersion);
  CHECK(parsed["run_id"] == "r1");
  REQUIRE(parsed["ranks"].size() == 3);  // the rows, not the head's "ranks"
  const json& first = parsed["ranks"][0];
  CHECK(first["host"] == "gpu\"01");
  CHECK(first["pid"] == 4242);
  CHECK(first["step"] == 17);
  CHECK(first["last_beat_ms"] == 1700000000123);
  CHECK(first["loss"].get<double>() == 0.1);  // shortest round trip: exact
  CHECK(first["step_ms"].get<double>() == 250.5);
  CHECK(first["exit"].is_null());
  const json& second = parsed["ranks"][1];
  CHECK(second["exit"] == json{{"signal", "SIGKILL"}});
  CHECK(second["loss"].is_null());
  CHECK(second["step"].is_null());
  CHECK_FALSE(second.contains("step_ms"));
  const json& third = parsed["ranks"][2];
  CHECK(third["host"] == "gpu\\03\xc3\xbc\t");
  CHECK(third["pid"].is_null());
  CHECK(third["last_beat_ms"].is_null());
  CHECK(third["exit"] == json{{"code", 3}});

  // No rows and an empty head are still one valid object.
  CHECK(json::parse(state_json_text(json::object(), {}))["ranks"] == json::array());
  CHECK(json::parse(state_json_text(json{{"a", 1}}, {}))["a"] == 1);
}

TEST_CASE("the state writer writes rank rows to state.json off the caller's thread") {
  TempDir dir;
  std::string path = dir.path + "/state.json";
  {
    StateWriter writer(path);
    StateRankRow row;
    row.rank = 0;
    row.host = "h";
    row.state = "running";
    writer.submit(json{{"state", "running"}}, {row});
    CHECK(writer.flush().ok());
  }
  Result<json> state = read_state_file(path);
  REQUIRE(state.ok());
  CHECK((*state)["ranks"][0]["host"] == "h");
}
