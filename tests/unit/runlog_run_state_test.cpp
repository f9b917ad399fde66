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

RunSnapshot::Supervisor supervisor_of(int pid, int64_t ticks) { return {pid, this_host(), 1, ticks}; }

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
  RunSnapshot written;
  written.run_id = "r";
  written.state = "running";
  written.generation = 2;
  REQUIRE(write_state(run, written).ok());
  Result<RunSnapshot> state = read_state(run);
  REQUIRE(state.ok());
  CHECK(*state == written);
  CHECK(json::parse(read_file(run.state_path()).value())["version"] == kRunStateVersion);
  // No temp file is left beside it.
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir.path)) {
    (void)entry;
    ++files;
  }
  CHECK(files == 1);

  REQUIRE(write_file_atomic(run.state_path(), R"({"version": 9, "state": "running"})").ok());
  Result<RunSnapshot> newer = read_state(run);
  REQUIRE_FALSE(newer.ok());
  CHECK(newer.error().message.find("version 9") != std::string::npos);
  CHECK(newer.error().message.find("upgrade dtrain") != std::string::npos);
  CHECK(newer.error().message.find(run.state_path()) != std::string::npos);

  REQUIRE(write_file_atomic(run.state_path(), "[1,2").ok());
  Result<RunSnapshot> broken = read_state(run);
  REQUIRE_FALSE(broken.ok());
  CHECK(broken.error().message.find(run.state_path()) != std::string::npos);
}

TEST_CASE("supervisor_alive: this process yes, a dead pid or a reused pid no") {
  RunSnapshot state;
  state.state = "running";
  CHECK_FALSE(supervisor_alive(state));  // no supervisor recorded

  state.supervisor = supervisor_of(::getpid(), current_process_start_ticks());
  CHECK(current_process_start_ticks() > 0);
  CHECK(supervisor_alive(state));
  CHECK(display_state(state, true) == "running");

  state.supervisor = supervisor_of(dead_pid(), current_process_start_ticks());
  CHECK_FALSE(supervisor_alive(state));
  CHECK(display_state(state, false) == "supervisor gone");

  // Same pid, different start time: the pid was reused by an unrelated process.
  state.supervisor = supervisor_of(::getpid(), current_process_start_ticks() + 1);
  CHECK_FALSE(supervisor_alive(state));

  // A finished run whose supervisor has exited is simply finished.
  state.state = "failed";
  CHECK(display_state(state, false) == "failed");
  CHECK(is_terminal_state("stopped"));
  CHECK_FALSE(is_terminal_state("stopping"));
  state.state.clear();
  CHECK(display_state(state, true) == "unknown");
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

TEST_CASE("control requests: stop, stop with a checkpoint (a preemption), status, and what is refused") {
  for (ControlRequest request : {ControlRequest{ControlRequestType::stop}, ControlRequest{ControlRequestType::stop, true},
                                 ControlRequest{ControlRequestType::status}}) {
    Result<ControlRequest> again = parse_control_request(to_line(request));
    REQUIRE(again.ok());
    CHECK(*again == request);
  }
  CHECK(to_line(ControlRequest{ControlRequestType::stop}) == "{\"type\":\"stop\"}");  // as older supervisors read it
  CHECK(to_line(ControlRequest{ControlRequestType::stop, true}) == "{\"checkpoint\":true,\"type\":\"stop\"}");
  Result<ControlRequest> bad = parse_control_request("{\"type\":\"stop\",\"checkpoint\":\"yes\"}");
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.error().message == "\"checkpoint\" of a stop request must be true or false");
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

TEST_CASE("state.json's rank rows are written as the schema says: nulls, exits, non-finite numbers") {
  RunSnapshot::Rank started;
  started.rank = 0;
  started.host = "gpu\"01";  // escaped, not broken
  started.pid = 4242;
  started.state = "running";
  started.step = 17;
  started.last_beat_ms = 1700000000123;
  started.metrics.loss = 0.1;
  started.metrics.step_ms = 250.5;
  RunSnapshot::Rank killed;
  killed.rank = 1;
  killed.host = "gpu02";
  killed.local_rank = 1;
  killed.dp = 1;
  killed.state = "exited";
  killed.pid = 77;
  killed.exit = RunSnapshot::RankExit{std::nullopt, "SIGKILL"};
  killed.metrics.loss = std::numeric_limits<double>::quiet_NaN();
  RunSnapshot::Rank pending;
  pending.rank = 2;
  pending.host = "gpu\\03\xc3\xbc\t";  // backslash, UTF-8, control character
  pending.state = "pending";
  pending.exit = RunSnapshot::RankExit{3, std::nullopt};

  RunSnapshot snapshot;
  snapshot.run_id = "r1";
  snapshot.state = "running";
  snapshot.ranks = {started, killed, pending};
  std::string text = snapshot.text();
  json parsed = json::parse(text);
  CHECK(parsed == snapshot.to_json());  // the fast text and the JSON agree
  CHECK(parsed["version"] == kRunStateVersion);
  CHECK(parsed["run_id"] == "r1");
  REQUIRE(parsed["ranks"].size() == 3);
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
  CHECK_FALSE(second.contains("loss"));  // a diverged loss is left out, as JSON has no NaN
  CHECK(second["step"].is_null());
  CHECK_FALSE(second.contains("step_ms"));
  const json& third = parsed["ranks"][2];
  CHECK(third["host"] == "gpu\\03\xc3\xbc\t");
  CHECK(third["pid"].is_null());
  CHECK(third["last_beat_ms"].is_null());
  CHECK(third["exit"] == json{{"code", 3}});
  // "ranks" comes last, one rank a line.
  CHECK(text.find("\n  \"ranks\": [\n    {\"rank\": 0, ") != std::string::npos);
  CHECK(text.substr(text.size() - 7) == "\n  ]\n}\n");

  // No rows is still one valid object.
  CHECK(json::parse(RunSnapshot{}.text())["ranks"] == json::array());
}

TEST_CASE("the state writer writes the snapshot to state.json off the caller's thread") {
  TempDir dir;
  std::string path = dir.path + "/state.json";
  RunSnapshot snapshot;
  snapshot.state = "running";
  RunSnapshot::Rank& row = snapshot.ranks.emplace_back();
  row.host = "h";
  row.state = "running";
  {
    StateWriter writer(path);
    writer.submit(snapshot);
    CHECK(writer.flush().ok());
  }
  Result<RunSnapshot> state = read_state_file(path);
  REQUIRE(state.ok());
  CHECK(*state == snapshot);
}
