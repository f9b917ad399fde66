#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <sys/stat.h>
#include <unistd.h>

#include "launcher/base/fd.h"
#include "launcher/runlog/run_directory.h"
#include "launcher/runlog/run_state.h"

using namespace dtrain;

namespace {

// A private $DTRAIN_HOME for one test, removed afterwards.
struct TempHome {
  std::string path;
  TempHome() {
    char pattern[] = "/tmp/dtrain-runlog-test-XXXXXX";
    path = ::mkdtemp(pattern);
    ::setenv("DTRAIN_HOME", (path + "/home").c_str(), 1);
  }
  ~TempHome() {
    ::unsetenv("DTRAIN_HOME");
    std::error_code ignored;
    std::filesystem::remove_all(path, ignored);
  }
};

int mode_of(const std::string& path) {
  struct stat info{};
  REQUIRE(::stat(path.c_str(), &info) == 0);
  return static_cast<int>(info.st_mode & 07777);
}

}  // namespace

TEST_CASE("run ids carry a sanitised name, the UTC time and 4 random hex digits") {
  // 2026-11-29 23:41:02.500 UTC
  const int64_t wall_ms = 1'795'995'662'500;
  std::string id = make_run_id("my job/v2", wall_ms);
  CHECK(id.rfind("my-job-v2-20261129-234102-", 0) == 0);
  REQUIRE(id.size() == std::string("my-job-v2-20261129-234102-").size() + 4);
  CHECK(id.substr(id.size() - 4).find_first_not_of("0123456789abcdef") == std::string::npos);

  CHECK(make_run_id("", wall_ms).rfind("job-20261129-", 0) == 0);
  // "/" and leading dots never survive: no escaping runs/, no hidden directories.
  CHECK(make_run_id("../..", wall_ms).rfind("job-20261129-", 0) == 0);
  CHECK(make_run_id(".hidden/x", wall_ms).rfind("hidden-x-", 0) == 0);
  std::string long_id = make_run_id(std::string(100, 'a'), wall_ms);
  CHECK(long_id.rfind(std::string(40, 'a') + "-2026", 0) == 0);
}

TEST_CASE("short ids are 8 hex digits, stable and distinct") {
  std::string a = short_id("train-20261129-234102-1a2b");
  CHECK(a.size() == 8);
  CHECK(a.find_first_not_of("0123456789abcdef") == std::string::npos);
  CHECK(short_id("train-20261129-234102-1a2b") == a);
  CHECK(short_id("train-20261129-234102-1a2c") != a);
}

TEST_CASE("dtrain_home follows DTRAIN_HOME, then XDG_STATE_HOME, then HOME") {
  std::string saved_xdg = std::getenv("XDG_STATE_HOME") ? std::getenv("XDG_STATE_HOME") : "";
  ::setenv("DTRAIN_HOME", "/x/dtrain-home", 1);
  CHECK(dtrain_home() == "/x/dtrain-home");
  CHECK(runs_root() == "/x/dtrain-home/runs");
  ::unsetenv("DTRAIN_HOME");
  ::setenv("XDG_STATE_HOME", "/x/state", 1);
  CHECK(dtrain_home() == "/x/state/dtrain");
  ::unsetenv("XDG_STATE_HOME");
  if (const char* home = std::getenv("HOME"); home && *home) {
    CHECK(dtrain_home() == std::string(home) + "/.local/state/dtrain");
  }
  if (!saved_xdg.empty()) ::setenv("XDG_STATE_HOME", saved_xdg.c_str(), 1);
}

TEST_CASE("create makes the run directory and its parents private, with ranks/ and hosts/") {
  TempHome home;
  Result<RunDirectory> run = RunDirectory::create("train-20261129-234102-1a2b");
  REQUIRE(run.ok());
  CHECK(run->path() == home.path + "/home/runs/train-20261129-234102-1a2b");
  CHECK(mode_of(home.path + "/home") == 0700);
  CHECK(mode_of(home.path + "/home/runs") == 0700);
  CHECK(mode_of(run->path()) == 0700);
  CHECK(mode_of(run->ranks_dir()) == 0700);
  CHECK(mode_of(run->hosts_dir()) == 0700);
  CHECK(run->rank_log_path(3) == run->path() + "/ranks/3.log");
  CHECK(run->host_facts_path("gpu/01") == run->path() + "/hosts/gpu_01.json");
  CHECK(run->plan_path(2) == run->path() + "/plan-2.json");
  CHECK(run->runtime_dir() == "/tmp/dtrain-" + std::to_string(::geteuid()) + "/" +
                                  short_id("train-20261129-234102-1a2b"));
  CHECK(run->ctl_link_path().size() > 0);
  // A second create of the same id must not reuse another run's directory.
  CHECK_FALSE(RunDirectory::create("train-20261129-234102-1a2b").ok());
  CHECK_FALSE(RunDirectory::create("../escape").ok());
}

TEST_CASE("read_host_facts reads hosts/<host>.json, and refuses a FIFO, a planted link and a file over 1 MiB at once") {
  TempHome home;
  Result<RunDirectory> run = RunDirectory::create("facts-20261202-180000-0a0b");
  REQUIRE(run.ok());
  { std::ofstream(run->host_facts_path("gpu01")) << "{\"agent_pid\": 4242}\n"; }
  Result<std::string> facts = run->read_host_facts("gpu01");
  REQUIRE(facts.ok());
  CHECK(*facts == "{\"agent_pid\": 4242}\n");

  ::alarm(10);  // a reader that waited on the FIFO would end the case here, as a failure
  REQUIRE(::mkfifo(run->host_facts_path("gpu02").c_str(), 0600) == 0);
  Result<std::string> fifo = run->read_host_facts("gpu02");
  ::alarm(0);
  REQUIRE_FALSE(fifo.ok());
  CHECK(fifo.error().message == "'" + run->host_facts_path("gpu02") + "' is a FIFO (named pipe), not a regular file");

  std::string elsewhere = home.path + "/facts.json";
  { std::ofstream(elsewhere) << "{\"agent_pid\": 1}\n"; }
  REQUIRE(::symlink(elsewhere.c_str(), run->host_facts_path("gpu03").c_str()) == 0);
  Result<std::string> linked = run->read_host_facts("gpu03");
  REQUIRE_FALSE(linked.ok());
  CHECK(linked.error().message.find("is a symbolic link") != std::string::npos);

  { std::ofstream(run->host_facts_path("gpu04")) << std::string((1 << 20) + 1, ' '); }
  Result<std::string> big = run->read_host_facts("gpu04");
  REQUIRE_FALSE(big.ok());
  CHECK(big.error().message.find("over the 1 MiB limit") != std::string::npos);
}

TEST_CASE("open finds a run by exact id or unique prefix and explains the rest") {
  TempHome home;
  REQUIRE(RunDirectory::create("train-20261129-234102-1a2b").ok());
  REQUIRE(RunDirectory::create("train-20261129-234102-9f9f").ok());
  REQUIRE(RunDirectory::create("eval-20261130-010101-0000").ok());

  CHECK(RunDirectory::open("eval-20261130-010101-0000")->id() == "eval-20261130-010101-0000");
  CHECK(RunDirectory::open("ev")->id() == "eval-20261130-010101-0000");
  CHECK(RunDirectory::open("train-20261129-234102-9")->id() == "train-20261129-234102-9f9f");

  Result<RunDirectory> ambiguous = RunDirectory::open("train");
  REQUIRE_FALSE(ambiguous.ok());
  CHECK(ambiguous.error().kind == ErrorKind::user);
  CHECK(ambiguous.error().message.find("ambiguous") != std::string::npos);
  CHECK(ambiguous.error().message.find("train-20261129-234102-1a2b") != std::string::npos);
  CHECK(ambiguous.error().message.find("train-20261129-234102-9f9f") != std::string::npos);

  Result<RunDirectory> missing = RunDirectory::open("nosuch");
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.error().kind == ErrorKind::user);
  CHECK(missing.error().message.find("no run 'nosuch' in " + runs_root()) != std::string::npos);
  CHECK(missing.error().message.find("dtrain status") != std::string::npos);

  CHECK_FALSE(RunDirectory::open("").ok());
  CHECK_FALSE(RunDirectory::open("../home").ok());
}

TEST_CASE("list_runs sorts by start time and shows a broken state.json as unknown") {
  TempHome home;
  CHECK(RunDirectory::list_runs()->empty());  // no runs directory at all yet

  Result<RunDirectory> late = RunDirectory::create("b-late");
  Result<RunDirectory> early = RunDirectory::create("a-early");
  Result<RunDirectory> broken = RunDirectory::create("c-broken");
  REQUIRE((late.ok() && early.ok() && broken.ok()));
  // Written by hand, as a person or an older dtrain may have: keys left out read as absent.
  nlohmann::json state = {{"version", 1}, {"run_id", "b-late"},   {"name", "late"},        {"state", "succeeded"},
                          {"exit_code", 0},       {"world_size", 4},       {"submitted_at_ms", 2000},
                          {"finished_at_ms", 5000}, {"hosts", {{{"name", "a"}}, {{"name", "b"}}}}};
  REQUIRE(write_file_atomic(late->state_path(), state.dump()).ok());
  state["run_id"] = "a-early";
  state["submitted_at_ms"] = 1000;
  REQUIRE(write_file_atomic(early->state_path(), state.dump()).ok());
  REQUIRE(write_file_atomic(broken->state_path(), "{not json").ok());

  Result<std::vector<RunSummary>> runs = RunDirectory::list_runs();
  REQUIRE(runs.ok());
  REQUIRE(runs->size() == 3);
  CHECK((*runs)[0].id == "a-early");
  CHECK((*runs)[1].id == "b-late");
  CHECK((*runs)[1].display_state == "succeeded");
  CHECK((*runs)[1].host_count == 2);
  CHECK((*runs)[1].world_size == 4);
  CHECK((*runs)[1].finished_at_ms == 5000);
  CHECK((*runs)[2].id == "c-broken");  // started "now" (directory mtime): last
  CHECK((*runs)[2].display_state == "unknown");
  CHECK((*runs)[2].problem.find("state.json") != std::string::npos);
}

TEST_CASE("the runtime directory is private and ctl.sock links into it") {
  TempHome home;
  // A unique run id keeps parallel test runs from sharing a runtime directory.
  std::string id = "rt-" + std::to_string(::getpid()) + "-" + std::to_string(reinterpret_cast<uintptr_t>(&home));
  Result<RunDirectory> run = RunDirectory::create(id);
  REQUIRE(run.ok());
  Result<RuntimeDirectoryChoice> runtime = run->create_runtime_dir();
  REQUIRE(runtime.ok());
  CHECK_FALSE(runtime->fell_back());
  std::string path = runtime->directory.path();
  CHECK(path == run->runtime_dir());
  CHECK(mode_of(path) == 0700);
  CHECK(run->create_runtime_dir().ok());  // idempotent

  REQUIRE(run->link_control_socket(path + "/ctl.sock").ok());
  REQUIRE(run->link_control_socket(path + "/ctl.sock").ok());  // replaces a stale link
  char target[256] = {};
  REQUIRE(::readlink(run->ctl_link_path().c_str(), target, sizeof target - 1) > 0);
  CHECK(std::string(target) == path + "/ctl.sock");
  run->unlink_control_socket();
  CHECK(::access(run->ctl_link_path().c_str(), F_OK) != 0);
  ::rmdir(path.c_str());

  // Someone else's (here: a too-open) directory is not used: a private one for this run instead.
  REQUIRE(::mkdir(path.c_str(), 0777) == 0);
  ::chmod(path.c_str(), 0777);
  Result<RuntimeDirectoryChoice> fallback = run->create_runtime_dir();
  REQUIRE(fallback.ok());
  CHECK(fallback->fell_back());
  CHECK(fallback->refused.find("'" + path + "' has mode 0777") != std::string::npos);
  CHECK(fallback->directory.path() != path);
  CHECK(mode_of(fallback->directory.path()) == 0700);
  remove_runtime_directory(*fallback);
  ::rmdir(path.c_str());
}
