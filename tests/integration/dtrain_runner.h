#pragma once
// Runs the real dtrain binary for end-to-end tests: a private DTRAIN_HOME per test, captured
// output, deadlines instead of sleeps, and a scan of /proc that proves nothing of a run is left.

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include "tests/integration/support/process_probe.h"

namespace dtrain::testing {

inline int64_t now_ms() {
  using namespace std::chrono;
  return duration_cast<milliseconds>(steady_clock::now().time_since_epoch()).count();
}

/// Polls `condition` every 20 ms until it holds or `timeout_ms` passes.
inline bool wait_until(const std::function<bool()>& condition, int64_t timeout_ms) {
  int64_t deadline = now_ms() + timeout_ms;
  while (now_ms() < deadline) {
    if (condition()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return condition();
}

inline std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

inline void write_text(const std::string& path, const std::string& text) {
  std::ofstream(path) << text;
}

/// A temporary directory, removed (recursively) at the end of the test.
struct TempDir {
  TempDir() {
    char pattern[] = "/tmp/dtrain-test-XXXXXX";
    path = ::mkdtemp(pattern);
  }
  ~TempDir() { std::system(("rm -rf '" + path + "'").c_str()); }
  std::string path;
};

/// A started `dtrain` process with stdout/stderr captured into files.
struct DtrainProcess {
  pid_t pid = -1;
  std::string out_path, err_path;
  int exit_code = -1;
  bool reaped = false;  // waited for: `pid` may belong to another process now

  DtrainProcess() = default;
  DtrainProcess(const DtrainProcess&) = delete;
  DtrainProcess& operator=(const DtrainProcess&) = delete;
  DtrainProcess(DtrainProcess&& other) noexcept { take(other); }
  DtrainProcess& operator=(DtrainProcess&& other) noexcept {
    if (this != &other) {
      stop();
      take(other);
    }
    return *this;
  }
  /// A test that ends early (a failed REQUIRE) leaves no dtrain running: see stop().
  ~DtrainProcess() { stop(); }

  /// Waits for exit up to `timeout_ms`; on timeout kills it (and fails the caller's CHECKs).
  bool wait(int64_t timeout_ms) {
    if (pid <= 0 || reaped) return reaped;
    bool done = wait_until([&] {
      int status = 0;
      pid_t got = ::waitpid(pid, &status, WNOHANG);
      if (got == pid) {
        exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        return true;
      }
      return false;
    }, timeout_ms);
    if (!done) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
    reaped = true;
    return done;
  }
  /// Still running: SIGINT (dtrain stops its workers and releases its hosts), SIGKILL if it
  /// has not exited within 30 s.
  void stop() {
    if (pid <= 0 || reaped) return;
    ::kill(pid, SIGINT);
    wait(30'000);
  }
  std::string out() const { return read_text(out_path); }
  std::string err() const { return read_text(err_path); }

 private:
  void take(DtrainProcess& other) {
    pid = other.pid;
    out_path = std::move(other.out_path);
    err_path = std::move(other.err_path);
    exit_code = other.exit_code;
    reaped = other.reaped;
    other.pid = -1;
  }
};

/// One test's dtrain world: its own DTRAIN_HOME and working directory.
struct DtrainEnv {
  TempDir dir;
  /// Variables set for every dtrain started from here (after any PET_* of the test's own
  /// environment is removed: those are torchrun's options, and `dtrain run` reads them).
  std::vector<std::pair<std::string, std::string>> environment;
  std::string home() const { return dir.path + "/home"; }

  DtrainProcess start(const std::vector<std::string>& args) {
    static int counter = 0;
    DtrainProcess process;
    process.out_path = dir.path + "/out." + std::to_string(counter);
    process.err_path = dir.path + "/err." + std::to_string(counter++);
    process.pid = ::fork();
    if (process.pid == 0) {
      std::vector<std::string> torchrun_variables;
      for (char** entry = environ; *entry != nullptr; ++entry) {
        std::string variable = *entry;
        if (variable.rfind("PET_", 0) == 0) torchrun_variables.push_back(variable.substr(0, variable.find('=')));
      }
      for (const std::string& name : torchrun_variables) ::unsetenv(name.c_str());
      for (const auto& [name, value] : environment) ::setenv(name.c_str(), value.c_str(), 1);
      ::setenv("DTRAIN_HOME", home().c_str(), 1);
      if (::chdir(dir.path.c_str()) != 0) _exit(126);
      int out = ::open(process.out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
      int err = ::open(process.err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
      ::dup2(out, 1);
      ::dup2(err, 2);
      int null_fd = ::open("/dev/null", O_RDONLY);
      ::dup2(null_fd, 0);
      std::vector<char*> argv;
      std::string exe = DTRAIN_EXE;
      argv.push_back(exe.data());
      std::vector<std::string> copy = args;
      for (std::string& arg : copy) argv.push_back(arg.data());
      argv.push_back(nullptr);
      ::execv(exe.c_str(), argv.data());
      _exit(127);
    }
    return process;
  }

  /// Runs dtrain to completion (up to `timeout_ms`).
  DtrainProcess run(const std::vector<std::string>& args, int64_t timeout_ms = 120'000) {
    DtrainProcess process = start(args);
    process.wait(timeout_ms);
    return process;
  }

  std::string write_spec(const std::string& name, const std::string& yaml) {
    std::string path = dir.path + "/" + name;
    write_text(path, yaml);
    return path;
  }

  /// The only run directory (tests submit one run each unless they say otherwise).
  std::vector<std::string> run_dirs() const {
    std::vector<std::string> dirs;
    std::string root = home() + "/runs";
    if (DIR* d = ::opendir(root.c_str())) {
      while (dirent* entry = ::readdir(d)) {
        std::string name = entry->d_name;
        if (name != "." && name != "..") dirs.push_back(root + "/" + name);
      }
      ::closedir(d);
    }
    return dirs;
  }
};

/// The newest run directory to appear under DTRAIN_HOME (waits up to 20 s for the first).
inline std::string only_run_dir(DtrainEnv& env) {
  std::string dir;
  wait_until([&] { auto dirs = env.run_dirs(); if (dirs.empty()) return false; dir = dirs[0]; return true; }, 20000);
  return dir;
}

/// A rank's field in state.json (pid, step), or 0 when the file or the field is not there yet.
inline int64_t rank_field(const std::string& run_dir, int rank, const char* field) {
  nlohmann::json state = nlohmann::json::parse(read_text(run_dir + "/state.json"), nullptr, false);
  if (!state.is_object() || !state["ranks"].is_array() || state["ranks"].size() <= static_cast<size_t>(rank)) return 0;
  const auto& value = state["ranks"][static_cast<size_t>(rank)][field];
  return value.is_number_integer() ? value.get<int64_t>() : 0;
}

inline int rank_pid(const std::string& run_dir, int rank) { return static_cast<int>(rank_field(run_dir, rank, "pid")); }

/// The newest step dtrain-train logged for a rank ("step N loss ..." lines, every --log-every
/// steps), -1 before the first. Rank logs are written as lines arrive; state.json is rewritten
/// at most every 500 ms, in which a short test run can all but end, so a fault timed by
/// state.json's step can land near the end of the run, or after it.
inline int64_t rank_logged_step(const std::string& run_dir, int rank) {
  std::istringstream log(read_text(run_dir + "/ranks/" + std::to_string(rank) + ".log"));
  std::string line;
  int64_t newest = -1;
  while (std::getline(log, line)) {
    if (line.rfind("step ", 0) != 0) continue;
    newest = std::max<int64_t>(newest, std::strtoll(line.c_str() + 5, nullptr, 10));
  }
  return newest;
}

/// A rank's pid from its newest worker.started event in events.jsonl (written as it happens,
/// unlike state.json's paced rewrite), or 0 before that event.
inline int started_pid(const std::string& run_dir, int rank) {
  std::ifstream in(run_dir + "/events.jsonl");
  std::string line;
  int pid = 0;
  while (std::getline(in, line)) {
    if (line.find("\"worker.started\"") == std::string::npos) continue;
    nlohmann::json event = nlohmann::json::parse(line, nullptr, false);
    if (event.is_object() && event.value("rank", -1) == rank && event["pid"].is_number_integer()) pid = event["pid"].get<int>();
  }
  return pid;
}

/// Each rank's "dtrain-train: final step=N loss=L checksum=C" line (loss, and the checksum of
/// that rank's own shard), "" for a rank without one: what bit-identical runs compare.
inline std::vector<std::string> ranks_final_lines(const std::string& run_dir, int world) {
  std::vector<std::string> lines;
  for (int rank = 0; rank < world; ++rank) {
    std::string log = read_text(run_dir + "/ranks/" + std::to_string(rank) + ".log");
    size_t at = log.rfind("dtrain-train: final");
    lines.push_back(at == std::string::npos ? "" : log.substr(at, log.find('\n', at) - at));
  }
  return lines;
}

/// Every event of an events.jsonl, header excluded.
inline std::vector<nlohmann::json> read_events(const std::string& path) {
  std::vector<nlohmann::json> events;
  std::ifstream in(path);
  std::string line;
  bool header = true;
  while (std::getline(in, line)) {
    if (header) { header = false; continue; }
    nlohmann::json event = nlohmann::json::parse(line, nullptr, false);
    if (!event.is_discarded()) events.push_back(event);
  }
  return events;
}

inline std::vector<nlohmann::json> events_named(const std::vector<nlohmann::json>& events,
                                                const std::string& name) {
  std::vector<nlohmann::json> found;
  for (const auto& event : events) {
    if (event.value("ev", "") == name) found.push_back(event);
  }
  return found;
}

/// Pids of live (non-zombie) processes whose environment holds DTRAIN_RUN_ID=<run_id>: every
/// worker and every descendant of one, wherever it was reparented. One implementation for all
/// integration tests: support/process_probe's.
using dtrain::test::processes_of_run;

/// Checks (doctest CHECK) that no process of run `run_id` is left, waiting up to 5 s.
inline void check_nothing_left(const std::string& run_id) {
  bool gone = wait_until([&] { return processes_of_run(run_id).empty(); }, 5000);
  CHECK_MESSAGE(gone, "processes of run " << run_id << " survive: " << processes_of_run(run_id).size());
}

/// True when `pid` does not exist (or is a zombie nobody will run again).
inline bool process_gone(int pid) {
  if (::kill(pid, 0) != 0) return true;
  std::string stat = read_text("/proc/" + std::to_string(pid) + "/stat");
  size_t paren = stat.rfind(')');
  return paren != std::string::npos && paren + 2 < stat.size() && stat[paren + 2] == 'Z';
}

/// The run id from a run directory path.
inline std::string run_id_of(const std::string& run_dir) {
  return run_dir.substr(run_dir.find_last_of('/') + 1);
}

}  // namespace dtrain::testing
