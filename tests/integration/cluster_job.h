#pragma once
// ClusterJob: one `dtrain submit` run from the test cluster's control namespace, exactly as a
// user on the launch node would run it, with the helpers the end-to-end cluster tests share:
// a spec writer for cluster hosts, run-directory and event access, and the "nothing of the run
// is left on any host" check.
//
// Cluster hosts have a private /tmp each, but the build tree is visible on all of them, so the
// job's working directory, DTRAIN_HOME and checkpoint directory live under
// $DTRAIN_BINARY_DIR/e2e-tmp/ (checkpoints must be shared: each shard is written by DP rank 0
// of its coordinate, wherever it runs, and read by every rank on resume).

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <climits>
#include <cmath>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/integration/cluster_fixture.h"
#include "tests/integration/dtrain_runner.h"

#ifndef DTRAIN_BINARY_DIR
#error "cluster_job.h needs DTRAIN_BINARY_DIR (integration tests get it from CMake)"
#endif

namespace dtrain::testing {

/// What a cluster spec says besides the boilerplate (ssh settings, heartbeat, stop_grace).
struct ClusterSpec {
  std::string name = "e2e";
  std::vector<int> hosts{1, 2, 3};   ///< cluster host numbers
  std::vector<int> spares;
  int slots = 2;
  std::string command;               ///< YAML flow list: [dtrain-train, --steps, "300"]
  bool remote_dtrain = true;         ///< false: let dtrain provision itself on the hosts
  std::string extra;                 ///< more top-level YAML (elastic:, batch:, checkpoint:)
  std::string worker_extra;          ///< more worker: keys, indented ("  env: {A: b}\n")
};

/// The spec text for `job` on `cluster`: heartbeat interval 200ms, timeout 2s, hang_timeout
/// 10s, stop_grace 2s, gloo.
inline std::string cluster_spec_yaml(const TestCluster& cluster, const ClusterSpec& job) {
  std::string yaml = "version: 1\nname: " + job.name + "\nhosts:\n";
  for (int number : job.hosts) yaml += "  - " + cluster.host(number).name + "\n";
  if (!job.spares.empty()) {
    yaml += "spares:\n";
    for (int number : job.spares) yaml += "  - " + cluster.host(number).name + "\n";
  }
  yaml += "slots_per_host: " + std::to_string(job.slots) + "\n";
  yaml += "ssh:\n  user: " + cluster.user() + "\n  identity: [" + cluster.key_path() +
          "]\n  known_hosts: " + cluster.known_hosts_path() + "\n  connect_timeout: 5s\n";
  if (job.remote_dtrain) yaml += std::string("  remote_dtrain: ") + DTRAIN_EXE + "\n";
  yaml += "worker:\n  command: " + job.command + "\n  backend: gloo\n" + job.worker_extra;
  yaml += "heartbeat: {interval: 200ms, timeout: 2s, hang_timeout: 10s}\nstop_grace: 2s\n";
  return yaml + job.extra;
}

/// The reference trainer on hosts 1-3 × 2 slots that can lose one host: global batch 24 =
/// micro 2 × data 6 × accum 2; on 2 hosts data 4 × accum 3 keeps it. min_hosts 2, one restart.
inline ClusterSpec shrinkable_trainer_job(const std::string& name, int steps);

/// The reference trainer for `steps` steps, logging every 50.
inline std::string trainer_command(int steps) {
  return "[dtrain-train, --steps, \"" + std::to_string(steps) + "\", --log-every, \"50\"]";
}

inline ClusterSpec shrinkable_trainer_job(const std::string& name, int steps) {
  ClusterSpec spec;
  spec.name = name;
  spec.command = trainer_command(steps);
  spec.extra = "batch: {global: 24, micro: 2}\nelastic: {min_hosts: 2, max_restarts: 1}\n";
  return spec;
}

/// "dtrain-train: final step=N loss=L checksum=C" from a rank log ("" when absent).
inline std::string final_line(const std::string& log) {
  size_t at = log.rfind("dtrain-train: final");
  return at == std::string::npos ? "" : log.substr(at, log.find('\n', at) - at);
}

/// L from a final line, or NaN.
inline double final_loss(const std::string& line) {
  size_t at = line.find("loss=");
  return at == std::string::npos ? std::nan("") : std::atof(line.c_str() + at + 5);
}

/// One `dtrain submit` in the control namespace. Its directory (working directory, DTRAIN_HOME,
/// checkpoints) lies under the build tree and is removed at the end; a still-running dtrain is
/// killed and reaped by the destructor.
class ClusterJob {
 public:
  ClusterJob(const TestCluster& cluster, const std::string& tag) : cluster_(cluster) {
    static int counter = 0;
    dir_ = std::string(DTRAIN_BINARY_DIR) + "/e2e-tmp/" + cluster.prefix() + "-" + tag + "-" +
           std::to_string(counter++);
    std::system(("rm -rf '" + dir_ + "' && mkdir -p '" + dir_ + "/home' '" + dir_ + "/ckpt'").c_str());
  }
  ~ClusterJob() {
    if (pid_ > 0 && exit_code_ < 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    std::system(("rm -rf '" + dir_ + "'").c_str());
  }
  ClusterJob(const ClusterJob&) = delete;
  ClusterJob& operator=(const ClusterJob&) = delete;

  const std::string& dir() const { return dir_; }
  std::string checkpoint_dir() const { return dir_ + "/ckpt"; }

  /// Writes the spec (with checkpoint.dir set to this job's shared directory when
  /// `checkpoint_interval` > 0) and returns its path.
  std::string write_spec(const ClusterSpec& job, int checkpoint_interval = 0) {
    std::string yaml = cluster_spec_yaml(cluster_, job);
    if (checkpoint_interval > 0) {
      yaml += "checkpoint: {dir: " + checkpoint_dir() + ", interval_steps: " +
              std::to_string(checkpoint_interval) + ", keep: 3}\n";
    }
    spec_path_ = dir_ + "/job.yaml";
    write_text(spec_path_, yaml);
    return spec_path_;
  }

  /// Writes `yaml` as the job's spec as it is (a spec cluster_spec_yaml cannot express, such as
  /// hosts: kubernetes) and returns its path.
  std::string write_spec_text(const std::string& yaml) {
    spec_path_ = dir_ + "/job.yaml";
    write_text(spec_path_, yaml);
    return spec_path_;
  }

  /// Starts `dtrain submit SPEC ARGS...` through `testcluster.sh exec ctl`, which execs all the
  /// way down, so pid() is dtrain itself once it has exec'd (wait_exec()).
  void start(const std::vector<std::string>& args = {}) {
    std::vector<std::string> command{"submit", spec_path_};
    command.insert(command.end(), args.begin(), args.end());
    start_dtrain(command);
  }

  /// Starts `dtrain COMMAND...` as start() does (`dtrain resume RUN`): same home, directory and
  /// out/err files (truncated).
  void start_dtrain(const std::vector<std::string>& command) {
    std::vector<std::string> argv{std::string(DTRAIN_SOURCE_DIR) + "/scripts/testcluster.sh", "exec", "ctl", DTRAIN_EXE};
    argv.insert(argv.end(), command.begin(), command.end());
    pid_ = ::fork();
    if (pid_ == 0) {
      ::setenv("DTRAIN_HOME", (dir_ + "/home").c_str(), 1);
      ::setenv("DTRAIN_TESTCLUSTER_PREFIX", cluster_.prefix().c_str(), 1);
      if (::chdir(dir_.c_str()) != 0) _exit(126);
      int out = ::open((dir_ + "/out").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
      int err = ::open((dir_ + "/err").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
      int null_fd = ::open("/dev/null", O_RDONLY);
      ::dup2(null_fd, 0);
      ::dup2(out, 1);
      ::dup2(err, 2);
      std::vector<char*> raw;
      for (std::string& arg : argv) raw.push_back(arg.data());
      raw.push_back(nullptr);
      ::execv(raw[0], raw.data());
      _exit(127);
    }
  }

  /// True once pid() runs the dtrain binary (no longer the script that launches it).
  bool wait_exec(int64_t timeout_ms = 10000) const {
    char resolved[PATH_MAX];
    std::string want = ::realpath(DTRAIN_EXE, resolved) ? resolved : DTRAIN_EXE;
    return wait_until([&] {
      char link[PATH_MAX] = {};
      ssize_t n = ::readlink(("/proc/" + std::to_string(pid_) + "/exe").c_str(), link, sizeof link - 1);
      return n > 0 && std::string(link, static_cast<size_t>(n)) == want;
    }, timeout_ms);
  }

  /// Waits up to `timeout_ms` for dtrain to exit; false (and dtrain killed) on timeout.
  bool wait(int64_t timeout_ms) {
    bool done = wait_until([&] {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) != pid_) return false;
      exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      return true;
    }, timeout_ms);
    if (!done) {
      ::kill(pid_, SIGKILL);
      int status = 0;
      ::waitpid(pid_, &status, 0);
      exit_code_ = 128 + SIGKILL;
    }
    return done;
  }

  /// Runs the job to its end (up to `timeout_ms`).
  bool run(const std::vector<std::string>& args = {}, int64_t timeout_ms = 90000) {
    start(args);
    return wait(timeout_ms);
  }

  pid_t pid() const { return pid_; }
  int exit_code() const { return exit_code_; }
  std::string out() const { return read_text(dir_ + "/out"); }
  std::string err() const { return read_text(dir_ + "/err"); }

  /// The run directory (waits up to 20 s for dtrain to create it; "" if it never does).
  std::string run_dir() {
    if (!run_dir_.empty()) return run_dir_;
    std::string root = dir_ + "/home/runs";
    wait_until([&] {
      if (DIR* d = ::opendir(root.c_str())) {
        while (dirent* entry = ::readdir(d)) {
          std::string name = entry->d_name;
          if (name != "." && name != "..") run_dir_ = root + "/" + name;
        }
        ::closedir(d);
      }
      return !run_dir_.empty();
    }, 20000);
    return run_dir_;
  }
  std::string run_id() { return run_id_of(run_dir()); }
  std::vector<nlohmann::json> events() { return read_events(run_dir() + "/events.jsonl"); }
  std::vector<nlohmann::json> events(const std::string& name) { return events_named(events(), name); }
  std::string rank_log(int rank) { return read_text(run_dir() + "/ranks/" + std::to_string(rank) + ".log"); }
  nlohmann::json plan(int generation) {
    return nlohmann::json::parse(read_text(run_dir() + "/plan-" + std::to_string(generation) + ".json"),
                                 nullptr, false);
  }

  /// Waits until generation `gen` runs: every worker of it has started.
  bool wait_running(int gen, int64_t timeout_ms) {
    return wait_until([&] {
      for (const auto& event : events("run.state")) {
        if (event.value("state", "") == "running" && event.value("gen", -1) == gen) return true;
      }
      return false;
    }, timeout_ms);
  }

  /// Waits until a checkpoint of at least `step` is committed.
  bool wait_checkpoint(int64_t step, int64_t timeout_ms) {
    return wait_until([&] {
      for (const auto& event : events("checkpoint.committed")) {
        if (event.value("step", int64_t{0}) >= step) return true;
      }
      return false;
    }, timeout_ms);
  }

 private:
  const TestCluster& cluster_;
  std::string dir_;
  std::string spec_path_;
  std::string run_dir_;
  pid_t pid_ = -1;
  int exit_code_ = -1;
};

/// What of run `run_id` is still alive anywhere, after polling up to `timeout_ms`: any process
/// carrying its DTRAIN_RUN_ID (hosts share the pid namespace, so this sees every host), any
/// process on a host besides its listening sshd, and any process in the control namespace but the
/// emulated API server.
/// "" when nothing is left.
inline std::string leftovers(const TestCluster& cluster, const std::string& run_id, int timeout_ms) {
  std::string left;
  wait_until([&] {
    left.clear();
    for (int pid : processes_of_run(run_id)) {
      left += "run process pid " + std::to_string(pid) + ": " +
              TestCluster::read_text("/proc/" + std::to_string(pid) + "/cmdline") + "\n";
    }
    for (size_t i = 1; i <= cluster.hosts().size(); ++i) {
      for (pid_t pid : cluster.leftover_pids_on(static_cast<int>(i))) {
        left += cluster.host(static_cast<int>(i)).name + ": pid " + std::to_string(pid) + " " +
                TestCluster::read_text("/proc/" + std::to_string(pid) + "/cmdline") + "\n";
      }
    }
    // The emulated Kubernetes API server (up --kubernetes) lives in ctl for the cluster's life.
    std::string api_server = std::string(trim(TestCluster::read_text(cluster.state_dir() + "/kube/apiserver.pid")));
    for (pid_t pid : cluster.pids_in_namespace(cluster.control_namespace())) {
      if (std::to_string(pid) == api_server) continue;
      left += cluster.control_namespace() + ": pid " + std::to_string(pid) + " " +
              TestCluster::read_text("/proc/" + std::to_string(pid) + "/cmdline") + "\n";
    }
    return left.empty();
  }, timeout_ms);
  return left;
}

/// Waits up to `timeout_ms` until host `host` holds nothing but sshd's sessions (a partitioned
/// host's, stuck on TCP connections nobody will answer until heal). Returns what else is left
/// ("" when nothing), one process a line.
inline std::string wait_only_sshd_left(const TestCluster& cluster, int host, int timeout_ms) {
  std::string left;
  wait_until([&] {
    left.clear();
    for (pid_t pid : cluster.leftover_pids_on(host)) {
      std::string cmdline = TestCluster::read_text("/proc/" + std::to_string(pid) + "/cmdline");
      if (cmdline.rfind("sshd", 0) != 0) left += std::to_string(pid) + " " + cmdline + "\n";
    }
    return left.empty();
  }, timeout_ms);
  return left;
}

/// Checks (doctest CHECK) that nothing of `job`'s run is left anywhere after up to `timeout_ms`,
/// listing what is.
inline void check_nothing_left(const TestCluster& cluster, ClusterJob& job, int timeout_ms = 8000) {
  std::string left = leftovers(cluster, job.run_id(), timeout_ms);
  CHECK_MESSAGE(left.empty(), "left behind by run " << job.run_id() << ":\n" << left);
}

/// The loss of shrinkable_trainer_job(name, steps) run without a fault. The trainer's loss curve
/// does not depend on the number of ranks for a fixed global batch, so the cheapest run, a
/// standalone world of one, is the reference.
inline double shrinkable_reference_loss(int steps) {
  static std::map<int, double> losses;
  auto known = losses.find(steps);
  if (known != losses.end()) return known->second;
  CommandOutput run = run_command({std::string(DTRAIN_BINARY_DIR) + "/cli/dtrain-train", "--standalone", "--steps",
                                   std::to_string(steps), "--global-batch", "24", "--micro-batch", "2", "--log-every", "0"});
  return losses[steps] = final_loss(final_line(run.output));
}

/// Checks (doctest) that each of `world_size` ranks of `job` ended at shrinkable_reference_loss.
inline void check_shrinkable_final_loss(ClusterJob& job, int world_size, int steps) {
  double expected = shrinkable_reference_loss(steps);
  REQUIRE(!std::isnan(expected));
  for (int rank = 0; rank < world_size; ++rank) {
    std::string line = final_line(job.rank_log(rank));
    INFO("rank " << rank << ": " << line);
    double loss = final_loss(line);
    REQUIRE(!std::isnan(loss));
    CHECK(std::fabs(loss - expected) <= 1e-4 * std::fabs(expected));
  }
}

}  // namespace dtrain::testing
