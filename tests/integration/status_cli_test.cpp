// Runs the real `dtrain status/logs/stop` against run directories this test fabricates, the way
// a supervisor would leave them: running, finished, and with a supervisor that died.

#include <doctest/doctest.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <fcntl.h>
#include <filesystem>
#include <poll.h>
#include <string>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <vector>

#include <nlohmann/json.hpp>

#include "launcher/base/fd.h"
#include "launcher/events/health_events.h"
#include "launcher/plan/rank_plan.h"
#include "launcher/runlog/event_log.h"
#include "launcher/runlog/rank_logs.h"
#include "launcher/runlog/run_directory.h"
#include "launcher/runlog/run_state.h"
#include "launcher/spec/spec_loader.h"

using namespace dtrain;
using nlohmann::json;
using SteadyClock = std::chrono::steady_clock;

namespace {

const int64_t kSubmitted = 1'795'995'662'000;  // 2026-11-29T23:41:02Z

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// A private $DTRAIN_HOME (inherited by the dtrain processes) and a fixed time zone, so local
// times print predictably.
struct TempHome {
  std::string path;
  TempHome() {
    char pattern[] = "/tmp/dtrain-status-cli-XXXXXX";
    path = ::mkdtemp(pattern);
    ::setenv("DTRAIN_HOME", path.c_str(), 1);
    ::setenv("TZ", "UTC", 1);
  }
  ~TempHome() {
    ::unsetenv("DTRAIN_HOME");
    std::error_code ignored;
    std::filesystem::remove_all(path, ignored);
  }
};

// One `dtrain` process with its output captured; killed and reaped if still running at the end.
class Dtrain {
 public:
  explicit Dtrain(const std::vector<std::string>& args) {
    Result<Pipe> out = make_pipe();
    Result<Pipe> err = make_pipe();
    REQUIRE((out.ok() && err.ok()));
    // Built before fork: the child of a threaded process may only make async-signal-safe calls.
    std::string exe = DTRAIN_EXE;
    std::vector<std::string> copies = args;
    std::vector<char*> argv = {exe.data()};
    for (std::string& arg : copies) argv.push_back(arg.data());
    argv.push_back(nullptr);
    pid_ = ::fork();
    REQUIRE(pid_ >= 0);
    if (pid_ == 0) {
      ::dup2(out->write_end.get(), 1);
      ::dup2(err->write_end.get(), 2);
      ::execv(exe.c_str(), argv.data());
      ::_exit(127);
    }
    out_ = std::move(out->read_end);
    err_ = std::move(err->read_end);
  }
  ~Dtrain() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }

  /// Reads output until `part` appears on stdout or `seconds` pass; true if it appeared.
  bool wait_for_output(const std::string& part, int seconds) {
    const auto deadline = SteadyClock::now() + std::chrono::seconds(seconds);
    while (!contains(out, part)) {
      if (!read_some_output(deadline)) return contains(out, part);
    }
    return true;
  }

  /// Reads everything until the process exits; returns its exit code (-1 on timeout: killed).
  int finish(int seconds = 20) {
    const auto deadline = SteadyClock::now() + std::chrono::seconds(seconds);
    while (read_some_output(deadline)) {
    }
    if (out_.valid() || err_.valid()) return -1;  // timed out; the destructor kills it
    int status = 0;
    REQUIRE(::waitpid(pid_, &status, 0) == pid_);
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }

  std::string out;
  std::string err;

 private:
  // One poll round; false once both pipes are at EOF or the deadline has passed.
  bool read_some_output(SteadyClock::time_point deadline) {
    if (!out_.valid() && !err_.valid()) return false;
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - SteadyClock::now()).count();
    if (left <= 0) return false;
    pollfd fds[2] = {{out_.get(), POLLIN, 0}, {err_.get(), POLLIN, 0}};
    if (::poll(fds, 2, static_cast<int>(left)) <= 0) return SteadyClock::now() < deadline;
    UniqueFd* ends[2] = {&out_, &err_};
    std::string* sinks[2] = {&out, &err};
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP))) continue;
      Result<size_t> got = read_some(ends[i]->get(), *sinks[i]);
      if (!got || *got == 0) ends[i]->reset();
    }
    return true;
  }

  pid_t pid_ = -1;
  UniqueFd out_;
  UniqueFd err_;
};

struct Outcome {
  int code;
  std::string out;
  std::string err;
};

Outcome run_dtrain(const std::vector<std::string>& args) {
  Dtrain process(args);
  int code = process.finish();
  return {code, process.out, process.err};
}

std::string this_host() {
  char name[256] = {};
  ::gethostname(name, sizeof name - 1);
  return name;
}

pid_t dead_pid() {
  pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  REQUIRE(child > 0);
  REQUIRE(::waitpid(child, nullptr, 0) == child);
  return child;
}

// state.json as the supervisor writes it; `supervisor_pid` is this test process unless told.
json make_state(const std::string& id, const std::string& state, pid_t supervisor_pid) {
  int64_t ticks = supervisor_pid == ::getpid() ? current_process_start_ticks() : 12345;
  bool ended = is_terminal_state(state);
  json ranks = json::array();
  for (int rank = 0; rank < 4; ++rank) {
    ranks.push_back({{"rank", rank}, {"host", rank < 2 ? "localhost" : "node2"}, {"local_rank", rank % 2},
                     {"pid", 4000 + rank}, {"state", ended ? "exited" : "running"},
                     {"last_beat_ms", kSubmitted + 60'000}, {"step", 40}, {"loss", 0.25},
                     {"exit", ended ? json{{"code", 0}} : json()}});
  }
  return {{"version", 1},
          {"run_id", id},
          {"name", id.substr(0, id.find('-'))},
          {"tenant", nullptr},
          {"state", state},
          {"exit_code", state == "succeeded" ? json(0) : state == "failed" ? json(1) : json()},
          {"generation", 0},
          {"world_size", 4},
          {"restarts", 0},
          {"hosts", {{{"name", "localhost"}, {"state", "connected"}}, {{"name", "node2"}, {"state", "connected"}}}},
          {"excluded_hosts", json::array()},
          {"supervisor", {{"pid", supervisor_pid}, {"hostname", this_host()}, {"started_at_ms", kSubmitted},
                          {"proc_start_ticks", ticks}}},
          {"submitted_at_ms", kSubmitted},
          {"finished_at_ms", ended ? json(kSubmitted + 65'000) : json()},
          {"updated_at_ms", kSubmitted + 61'000},
          {"ranks", ranks},
          {"last_recovery", nullptr},
          {"root_cause", nullptr},
          {"spec_path", "/dev/null"},
          {"detached", false}};
}

RunDirectory make_run(const std::string& id, const json& state) {
  Result<RunDirectory> run = RunDirectory::create(id);
  REQUIRE(run.ok());
  REQUIRE(write_file_atomic(run->state_path(), state.dump()).ok());
  Result<EventLog> events = EventLog::create(run->events_path(), id, kSubmitted);
  REQUIRE(events.ok());
  REQUIRE(events->append({{"ev", "run.submitted"}, {"name", "x"}}, kSubmitted).ok());
  REQUIRE(events->append({{"ev", "worker.exit"}, {"rank", 2}, {"host", "localhost"}, {"signal", "SIGKILL"}},
                         kSubmitted + 120).ok());
  return *run;
}

void append_in_place(const std::string& path, const std::string& text) {
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600));
  REQUIRE(fd.valid());
  REQUIRE(write_all(fd.get(), text).ok());
}

// Three hosts of two slots, TP inside a host, so a lost host drops one whole DP replica; dt-h4
// is the spare when `with_spare`.
spec::JobSpec three_host_spec(bool with_spare) {
  std::string yaml = "version: 1\nname: shrinky\nhosts: [dt-h1, dt-h2, dt-h3]\nslots_per_host: 2\n"
                     "worker: {command: [\"true\"]}\nparallelism: {tensor: 2}\n"
                     "batch: {global: 24, micro: 4}\nelastic: {min_hosts: 2}\n";
  if (with_spare) yaml += "spares: [dt-h4]\n";
  spec::LoadResult loaded = spec::parse_job_spec(yaml, "test.yaml", "/tmp");
  INFO(loaded.message());
  REQUIRE(loaded.ok());
  return *loaded.spec;
}

// plan-<gen>.json exactly as the driver writes it: plan::to_json of the real planner's output.
void write_plan(const RunDirectory& run, int generation, const spec::JobSpec& spec,
                const std::vector<std::string>& without = {}) {
  Result<plan::RankPlan> plan = plan::make_plan(spec, without);
  REQUIRE(plan.ok());
  REQUIRE(write_file_atomic(run.plan_path(generation), plan::to_json(*plan).dump(2)).ok());
}

// The lines of `text` from the one starting with `first` up to (not including) the next blank
// line or the next line that starts with a field label.
std::string block_from(const std::string& text, const std::string& first) {
  size_t start = text.find("\n" + first);
  if (start == std::string::npos) return "";
  std::string block;
  for (size_t at = start + 1; at < text.size();) {
    size_t end = text.find('\n', at);
    std::string line = text.substr(at, end - at);
    if (line.empty() || (!block.empty() && line[0] != ' ')) break;
    block += line + "\n";
    if (end == std::string::npos) break;
    at = end + 1;
  }
  return block;
}

}  // namespace

TEST_CASE("status with no runs says where it looked") {
  TempHome home;
  Outcome result = run_dtrain({"status"});
  CHECK(result.code == 0);
  CHECK(contains(result.out, "no runs in " + home.path + "/runs"));
}

TEST_CASE("status lists runs oldest first, with 'supervisor gone' for a dead supervisor") {
  TempHome home;
  json finished = make_state("done-20261129-234102-0001", "succeeded", dead_pid());
  finished["submitted_at_ms"] = kSubmitted - 1000;
  make_run("done-20261129-234102-0001", finished);
  make_run("live-20261129-234102-0002", make_state("live-20261129-234102-0002", "running", ::getpid()));
  make_run("gone-20261129-234102-0003", make_state("gone-20261129-234102-0003", "running", dead_pid()));

  Outcome result = run_dtrain({"status"});
  INFO(result.out, result.err);
  REQUIRE(result.code == 0);
  CHECK(contains(result.out, "RUN ID"));
  CHECK(contains(result.out, "STARTED"));
  CHECK(result.out.find("done-") < result.out.find("live-"));
  std::string gone_line = result.out.substr(result.out.find("gone-"));
  gone_line = gone_line.substr(0, gone_line.find('\n'));
  CHECK(contains(gone_line, "supervisor gone"));
  CHECK(contains(gone_line, "2026-11-29 23:41:02"));
  std::string live_line = result.out.substr(result.out.find("live-"));
  CHECK(contains(live_line.substr(0, live_line.find('\n')), "running"));
  std::string done_line = result.out.substr(result.out.find("done-"));
  done_line = done_line.substr(0, done_line.find('\n'));
  CHECK(contains(done_line, "succeeded"));
  CHECK(contains(done_line, "1m06s"));
}

TEST_CASE("status RUN shows the root cause, the ranks and recent events in compact form") {
  TempHome home;
  json state = make_state("train-20261129-234102-abcd", "failed", dead_pid());
  state["root_cause"] = {{"host", "localhost"}, {"rank", 2}, {"local_rank", 0}, {"pid", 4002},
                         {"signal", "SIGKILL"}, {"log", "/runs/x/ranks/2.log"}, {"message", "worker killed"}};
  state["ranks"][2]["exit"] = {{"signal", "SIGKILL"}};
  make_run("train-20261129-234102-abcd", state);

  Outcome result = run_dtrain({"status", "train-2026"});  // a unique prefix
  INFO(result.out, result.err);
  REQUIRE(result.code == 0);
  CHECK(contains(result.out, "failed (exit 1)"));
  CHECK(contains(result.out, "root cause   rank 2 on localhost (local rank 0, pid 4002): worker killed"));
  CHECK(contains(result.out, "RANK  HOST"));
  CHECK(contains(result.out, "BEAT AGE"));
  CHECK(contains(result.out, "SIGKILL"));
  // Events are read as types (launcher/events): a field this hand-written line lacks prints as
  // its struct's default (gen=0 pid=0), as a line dtrain writes always has them.
  CHECK(contains(result.out, "23:41:02.120 worker.exit gen=0 rank=2 host=localhost pid=0 signal=SIGKILL"));
  CHECK(contains(result.out, home.path + "/runs/train-20261129-234102-abcd/events.jsonl"));

  Outcome one_event = run_dtrain({"status", "train", "--json", "--events", "1"});
  REQUIRE(one_event.code == 0);
  json parsed = json::parse(one_event.out, nullptr, false);
  REQUIRE(parsed.is_object());
  CHECK(parsed["supervisor_alive"] == false);
  CHECK(parsed["state"]["state"] == "failed");
  REQUIRE(parsed["events"].size() == 1);
  CHECK(parsed["events"][0]["ev"] == "worker.exit");
}

TEST_CASE("an unknown or ambiguous run is a usage error that says what to do") {
  TempHome home;
  make_run("a-20261129-234102-0001", make_state("a-20261129-234102-0001", "succeeded", dead_pid()));
  make_run("a-20261129-234102-0002", make_state("a-20261129-234102-0002", "succeeded", dead_pid()));

  Outcome missing = run_dtrain({"status", "zzz"});
  CHECK(missing.code == 2);
  CHECK(contains(missing.err, "no run 'zzz'"));
  CHECK(contains(missing.err, "`dtrain status` lists runs"));

  Outcome ambiguous = run_dtrain({"logs", "a-2026"});
  CHECK(ambiguous.code == 2);
  CHECK(contains(ambiguous.err, "a-20261129-234102-0001"));
  CHECK(contains(ambiguous.err, "a-20261129-234102-0002"));
}

TEST_CASE("logs prints every rank with a prefix, filtered by rank, host and tail") {
  TempHome home;
  RunDirectory run = make_run("logs-20261129-234102-0001",
                              make_state("logs-20261129-234102-0001", "succeeded", dead_pid()));
  RankLogs logs(run.ranks_dir());
  for (int rank = 0; rank < 4; ++rank) {
    REQUIRE(logs.append(rank, 0, "hello from " + std::to_string(rank) + "\nstep 1\n", kSubmitted).ok());
  }

  Outcome all = run_dtrain({"logs", "logs"});
  INFO(all.out, all.err);
  REQUIRE(all.code == 0);
  CHECK(contains(all.out, "[rank 0] === dtrain generation 0 (2026-11-29T23:41:02.000Z) ===\n[rank 0] hello from 0\n"));
  CHECK(all.out.find("[rank 1] hello from 1") < all.out.find("[rank 3] hello from 3"));

  Outcome rank = run_dtrain({"logs", "logs", "--rank", "2"});
  CHECK(rank.out == "[rank 2] === dtrain generation 0 (2026-11-29T23:41:02.000Z) ===\n"
                    "[rank 2] hello from 2\n[rank 2] step 1\n");

  Outcome host = run_dtrain({"logs", "logs", "--host", "node2", "--tail", "1"});
  CHECK(host.out == "[rank 2] step 1\n[rank 3] step 1\n");

  Outcome bad_host = run_dtrain({"logs", "logs", "--host", "node3"});
  CHECK(bad_host.code == 2);
  CHECK(contains(bad_host.err, "did you mean 'node2'?"));
}

TEST_CASE("logs --follow streams new lines and new ranks, and ends with the run") {
  TempHome home;
  const std::string id = "follow-20261129-234102-0001";
  json state = make_state(id, "running", ::getpid());
  RunDirectory run = make_run(id, state);
  append_in_place(run.rank_log_path(0), "early line\n");

  Dtrain follow({"logs", id, "--follow"});
  REQUIRE(follow.wait_for_output("[rank 0] early line\n", 20));
  append_in_place(run.rank_log_path(0), "later line\n");
  REQUIRE(follow.wait_for_output("[rank 0] later line\n", 20));
  append_in_place(run.rank_log_path(3), "rank three appears\n");
  REQUIRE(follow.wait_for_output("[rank 3] rank three appears\n", 20));

  append_in_place(run.rank_log_path(0), "last words, no newline");
  state["state"] = "succeeded";
  state["exit_code"] = 0;
  REQUIRE(write_file_atomic(run.state_path(), state.dump()).ok());
  int code = follow.finish();
  INFO(follow.out, follow.err);
  CHECK(code == 0);
  CHECK(contains(follow.out, "[rank 0] last words, no newline\n"));
  CHECK(contains(follow.err, "ended (state succeeded)"));
}

TEST_CASE("logs --follow stops when the supervisor is gone") {
  TempHome home;
  const std::string id = "orphan-20261129-234102-0001";
  RunDirectory run = make_run(id, make_state(id, "running", dead_pid()));
  append_in_place(run.rank_log_path(1), "only line\n");
  Outcome result = run_dtrain({"logs", id, "-f"});
  CHECK(result.code == 0);
  CHECK(result.out == "[rank 1] only line\n");
  CHECK(contains(result.err, "supervisor"));
}

TEST_CASE("stop asks the supervisor over ctl.sock and waits for the final state") {
  TempHome home;
  const std::string id = "stopme-20261129-234102-0001";
  json state = make_state(id, "running", ::getpid());
  RunDirectory run = make_run(id, state);

  // A stand-in supervisor: answers one stop request, then records the stopped state.
  std::string socket_dir = home.path + "/rt";
  REQUIRE(::mkdir(socket_dir.c_str(), 0700) == 0);
  std::string socket_path = socket_dir + "/ctl.sock";
  UniqueFd listener(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::copy(socket_path.begin(), socket_path.end(), address.sun_path);
  REQUIRE(::bind(listener.get(), reinterpret_cast<sockaddr*>(&address), sizeof address) == 0);
  REQUIRE(::listen(listener.get(), 1) == 0);
  REQUIRE(::symlink(socket_path.c_str(), run.ctl_link_path().c_str()) == 0);
  std::string request;
  std::thread supervisor([&] {
    UniqueFd connection(::accept(listener.get(), nullptr, nullptr));
    if (!connection.valid()) return;
    while (request.find('\n') == std::string::npos) {
      Result<size_t> got = read_some(connection.get(), request);
      if (!got || *got == 0) break;
    }
    (void)write_all(connection.get(), "{\"type\":\"ok\",\"state\":\"stopping\"}\n");
    json stopped = state;
    stopped["state"] = "stopped";
    stopped["exit_code"] = 130;
    (void)write_file_atomic(run.state_path(), stopped.dump());
  });
  Outcome result = run_dtrain({"stop", "stopme", "--timeout", "20s"});
  ::shutdown(listener.get(), SHUT_RDWR);  // frees accept() should dtrain never have connected
  supervisor.join();
  INFO(result.out, result.err);
  CHECK(result.code == 0);
  CHECK(request == "{\"type\":\"stop\"}\n");
  CHECK(contains(result.out, "stopped " + id + " (state stopped, exit 130)"));

  Outcome again = run_dtrain({"stop", "stopme"});
  CHECK(again.code == 0);
  CHECK(contains(again.out, "already ended (state stopped, exit 130)"));
}

TEST_CASE("stop without a control socket while the supervisor lives says how to stop it") {
  TempHome home;
  const std::string id = "nosock-20261129-234102-0001";
  make_run(id, make_state(id, "running", ::getpid()));
  Outcome result = run_dtrain({"stop", id, "--timeout", "2s"});
  CHECK(result.code == 3);
  CHECK(contains(result.err, "ctl.sock"));
  CHECK(contains(result.err, "kill -INT " + std::to_string(::getpid())));
}

TEST_CASE("status RUN shows the plan of a finished run: sizes, batch and each host's ranks") {
  TempHome home;
  const std::string id = "steady-20261129-234102-0001";
  RunDirectory run = make_run(id, make_state(id, "succeeded", dead_pid()));
  write_plan(run, 0, three_host_spec(false));

  Outcome result = run_dtrain({"status", id});
  INFO(result.out, result.err);
  REQUIRE(result.code == 0);
  CHECK(block_from(result.out, "plan") ==
        "plan         gen 0: world 6 = dp 3 × pp 1 × tp 2; global batch 24 = micro 4 × dp 3 × grad_accum 2\n"
        "             excluded: none; spares in use: none\n"
        "             rank(dp,pp,tp) by host:\n"
        "               dt-h1  0(0,0,0) 1(0,0,1)\n"
        "               dt-h2  2(1,0,0) 3(1,0,1)\n"
        "               dt-h3  4(2,0,0) 5(2,0,1)\n");

  Outcome as_json = run_dtrain({"status", id, "--json"});
  REQUIRE(as_json.code == 0);
  json parsed = json::parse(as_json.out, nullptr, false);
  REQUIRE(parsed.is_object());
  CHECK(parsed["plan_generation"] == 0);
  CHECK(parsed["plan"]["world_size"] == 6);
  CHECK(parsed["plan"]["ranks"][5]["host"] == "dt-h3");
  CHECK(parsed["plan_change"].is_null());
}

TEST_CASE("status RUN after a shrink shows the current plan, how it changed, and every recovery phase") {
  TempHome home;
  const std::string id = "shrunk-20261129-234102-0001";
  json state = make_state(id, "succeeded", dead_pid());
  state["generation"] = 2;
  state["restarts"] = 1;
  state["world_size"] = 4;
  state["excluded_hosts"] = {"dt-h2"};
  // rendezvous_ms and a phase this dtrain does not know yet are printed too; total is the headline.
  state["last_recovery"] = {{"gen", 2}, {"cause", {{"host", "dt-h2"}, {"detail", "host lost"}}},
                            {"resume_step", 40}, {"steps_lost", 3},
                            {"phases", {{"total_ms", 2400}, {"first_step_ms", 90}, {"rendezvous_ms", 30},
                                        {"spawn_ms", 200}, {"replan_ms", 1}, {"stop_ms", 40},
                                        {"detect_ms", 2016}, {"warmup_ms", 23}}}};
  RunDirectory run = make_run(id, state);
  spec::JobSpec spec = three_host_spec(false);
  write_plan(run, 0, spec);
  write_plan(run, 1, spec);  // a restart in place keeps the plan
  write_plan(run, 2, spec, {"dt-h2"});

  Outcome result = run_dtrain({"status", id});
  INFO(result.out, result.err);
  REQUIRE(result.code == 0);
  CHECK(block_from(result.out, "plan") ==
        "plan         gen 2: world 4 = dp 2 × pp 1 × tp 2; global batch 24 = micro 4 × dp 2 × grad_accum 3\n"
        "             shrunk from 6 to 4 ranks at gen 2: host dt-h2 excluded; data 3 → 2; grad_accum 2 → 3\n"
        "             excluded: dt-h2; spares in use: none\n"
        "             rank(dp,pp,tp) by host:\n"
        "               dt-h1  0(0,0,0) 1(0,0,1)\n"
        "               dt-h3  2(1,0,0) 3(1,0,1)\n");
  CHECK(contains(result.out, "recovery     gen 2 after dt-h2 host lost: resumed at step 40 (3 steps lost) in 2400ms"
                             " — detect 2016ms, stop 40ms, replan 1ms, spawn 200ms, rendezvous 30ms,"
                             " first step 90ms, warmup 23ms\n"));

  Outcome as_json = run_dtrain({"status", id, "--json", "--events", "0"});
  REQUIRE(as_json.code == 0);
  json parsed = json::parse(as_json.out, nullptr, false);
  REQUIRE(parsed.is_object());
  CHECK(parsed["plan_generation"] == 2);
  CHECK(parsed["plan"]["world_size"] == 4);
  CHECK(parsed["plan"]["without"] == json{"dt-h2"});
  CHECK(parsed["plan_change"] == "shrunk from 6 to 4 ranks at gen 2: host dt-h2 excluded; data 3 → 2; grad_accum 2 → 3");
}

TEST_CASE("status RUN names the spare that replaced a lost host") {
  TempHome home;
  const std::string id = "spare-20261129-234102-0001";
  json state = make_state(id, "running", ::getpid());
  state["generation"] = 1;
  RunDirectory run = make_run(id, state);
  spec::JobSpec spec = three_host_spec(true);
  write_plan(run, 0, spec);
  write_plan(run, 1, spec, {"dt-h2"});

  Outcome result = run_dtrain({"status", id});
  INFO(result.out, result.err);
  REQUIRE(result.code == 0);
  CHECK(contains(result.out, "             re-planned at gen 1, still 6 ranks: host dt-h2 excluded; spare dt-h4 in use; dt-h4 takes "
                             "dt-h2's place: ranks 2–3 at (tp,pp,dp) (0,0,1) (1,0,1)\n"
                             "             excluded: dt-h2; spares in use: dt-h4\n"));
  CHECK(contains(result.out, "               dt-h4 (spare)  2(1,0,0) 3(1,0,1)\n"));
}

TEST_CASE("status RUN without a plan file, or with a damaged one, still shows the run and says why") {
  TempHome home;
  const std::string id = "noplan-20261129-234102-0001";
  RunDirectory run = make_run(id, make_state(id, "running", ::getpid()));

  Outcome missing = run_dtrain({"status", id});
  INFO(missing.out, missing.err);
  CHECK(missing.code == 0);
  CHECK(contains(missing.out, "plan         - (no plan-0.json in " + run.path() + ")\n"));
  CHECK(contains(missing.out, "RANK  HOST"));

  append_in_place(run.plan_path(0), "{\"world_size\": 4, \"hosts\": [");
  Outcome damaged = run_dtrain({"status", id});
  CHECK(damaged.code == 0);
  CHECK(contains(damaged.out, "plan         - (" + run.plan_path(0) + ": not valid JSON; the file is damaged)\n"));
  Outcome as_json = run_dtrain({"status", id, "--json"});
  CHECK(as_json.code == 0);
  json parsed = json::parse(as_json.out, nullptr, false);
  REQUIRE(parsed.is_object());
  CHECK(parsed["plan"].is_null());
  CHECK(contains(parsed["plan_error"].get<std::string>(), "not valid JSON"));
}

TEST_CASE("status RUN of 512 ranks on 64 hosts summarises: hosts by state, the ranks that stand out, --all for every one") {
  TempHome home;
  const std::string id = "big-20261129-234102-0001";
  // Its supervisor gone: beat ages are measured against the last update (1 s for most ranks).
  json state = make_state(id, "running", dead_pid());
  json hosts = json::array();
  json ranks = json::array();
  for (int host = 0; host < 64; ++host) {
    std::string name = "gpu" + std::to_string(100 + host);
    hosts.push_back({{"name", name}, {"state", host == 17 ? "lost" : "connected"}});
    for (int local = 0; local < 8; ++local) {
      int rank = host * 8 + local;
      ranks.push_back({{"rank", rank}, {"host", name}, {"local_rank", local}, {"pid", 10000 + rank},
                       {"state", "running"}, {"last_beat_ms", kSubmitted + 60'000}, {"step", 40}, {"loss", 0.25},
                       {"exit", nullptr}});
    }
  }
  ranks[300]["step"] = 12;                             // behind
  ranks[301]["state"] = "exited";                      // not in the common state
  ranks[301]["exit"] = {{"signal", "SIGKILL"}};
  ranks[302]["last_beat_ms"] = kSubmitted + 30'000;    // silent for 31 s while the others beat 1 s ago
  state["hosts"] = hosts;
  state["ranks"] = ranks;
  state["world_size"] = 512;
  // 12 hosts warned at their start check: 8 lines are shown, and how many more.
  json health = json::array();
  for (int host = 0; host < 12; ++host) {
    events::HostHealth warned{"gpu" + std::to_string(100 + host), "start", "warn", events::HostHealth::kAdmitted};
    warned.detail = "clock offset " + std::to_string(1000 + host) + " ms";
    health.push_back(warned.to_json());
  }
  state["health"] = health;
  make_run(id, state);

  Outcome result = run_dtrain({"status", id});
  INFO(result.out, result.err);
  REQUIRE(result.code == 0);
  CHECK(contains(result.out, "hosts        64: 63 connected, 1 lost; gpu117 lost (--all lists every host)"));
  CHECK(contains(result.out, "512 ranks: 1 exited, 511 running; step min 12, median 40, max 40"));
  CHECK(contains(result.out, "3 stand out (not running, behind the median step, or silent) (--all lists every rank)"));
  CHECK(contains(result.out, "\n300   gpu137"));
  CHECK(contains(result.out, "\n301   gpu137"));
  CHECK(contains(result.out, "\n302   gpu137"));
  CHECK_FALSE(contains(result.out, "\n299   gpu137"));
  CHECK_FALSE(contains(result.out, "gpu163 (connected)"));
  CHECK(contains(result.out, "gpu107 warn (start)"));
  CHECK_FALSE(contains(result.out, "gpu108 warn (start)"));
  CHECK(contains(result.out, "... 4 more (--all lists them)"));

  Outcome all = run_dtrain({"status", id, "--all"});
  REQUIRE(all.code == 0);
  CHECK(contains(all.out, "gpu111 warn (start)"));
  CHECK_FALSE(contains(all.out, "more (--all lists them)"));
  CHECK(contains(all.out, "gpu163 (connected)"));
  CHECK(contains(all.out, "\n299   gpu137"));
  CHECK(contains(all.out, "\n511   gpu163"));
}
