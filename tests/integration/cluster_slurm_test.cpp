// dtrain inside real Slurm jobs on the namespace test cluster (testcluster.sh up 3 --slurm:
// munged + slurmctld in ctl, one slurmd per host, proctrack/cgroup in per-host cgroup trees).
// sbatch runs `dtrain run` with no host option on 3 nodes: hosts from the allocation, agents as
// one srun step; SIGUSR1 to the batch step (scancel --signal=USR1 --batch, the same delivery as
// --signal=B:USR1@T) makes every worker checkpoint at one step; a node killed mid-run is lost
// and the run goes on with the other two (elastic within the allocation); and afterwards no
// process of the run is left on any node and no job cgroup is left in any node's tree.

#include <doctest/doctest.h>
#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <thread>

#include "tests/integration/cluster_fixture.h"
#include "tests/integration/dtrain_runner.h"

using namespace dtrain;
using namespace dtrain::testing;

namespace {

// A stdlib-only training loop over the worker protocol: beats every step, and on ckpt.request
// writes ckpt/step-S/rank-R at the step it names, then stops 5 steps later.
constexpr const char* kTrainScript = R"PY(
import os, sys, time
sys.path.insert(0, os.environ["DTRAIN_TEST_PYTHON"])
from dtrain_worker import Worker
out = os.environ["DTRAIN_TEST_OUT"]
w = Worker.from_env()
rank = w.rank
steps = int(os.environ.get("DTRAIN_TEST_STEPS", "600"))
stop_at = None
open(os.path.join(out, "started-%d-gen%d" % (rank, w.generation)), "w").close()
for step in range(1, steps + 1):
    time.sleep(0.05)
    w.beat(step, loss=1.0 / step, step_ms=50)
    if w.checkpoint_requested(step):
        d = os.path.join(out, "ckpt", "step-%d" % step)
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "rank-%d" % rank), "w") as f:
            f.write(w.checkpoint_reason + "\n")
        stop_at = step + 5
    if stop_at is not None and step >= stop_at:
        break
w.close()
)PY";

struct SlurmJobDir {
  std::string path;  // under the build tree: every host sees it (hosts' /tmp and home are private)
  SlurmJobDir() {
    path = std::string(DTRAIN_BINARY_DIR) + "/slurm-test-" + std::to_string(::getpid());
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path + "/home");
    std::ofstream(path + "/train.py") << kTrainScript;
  }
  ~SlurmJobDir() { std::filesystem::remove_all(path); }
};

// `sbatch` from ctl; returns the job id.
std::string submit_batch(const TestCluster& cluster, const SlurmJobDir& dir, const std::string& dtrain_options,
                         const std::string& steps) {
  std::string script = dir.path + "/job.sbatch";
  // Every path is shell-quoted, and the output path goes to sbatch as an argument rather than an
  // `#SBATCH --output=` line: sbatch splits a directive at spaces ("Invalid directive" for a
  // checkout path that holds one).
  std::ofstream(script) << "#!/bin/bash\n"
                        << "#SBATCH --nodes=3 --ntasks-per-node=2 --no-kill\n"
                        << "scontrol show hostnames \"$SLURM_JOB_NODELIST\" > " << shell_quote(dir.path + "/hostnames")
                        << "\n"
                        << "export DTRAIN_HOME=" << shell_quote(dir.path + "/home")
                        << " DTRAIN_TEST_OUT=" << shell_quote(dir.path)
                        << " DTRAIN_TEST_PYTHON=" << shell_quote(std::string(DTRAIN_SOURCE_DIR) + "/worker/python")
                        << " DTRAIN_TEST_STEPS=" << shell_quote(steps) << "\n"
                        // exec: Slurm's USR1 for the batch step then reaches dtrain itself.
                        << "exec " << shell_quote(DTRAIN_EXE) << " run --name slurm-test " << dtrain_options
                        << " -- /usr/bin/python3 " << shell_quote(dir.path + "/train.py") << "\n";
  CommandOutput submitted =
      cluster.exec("ctl", {"sbatch", "--parsable", "--output=" + dir.path + "/slurm-%j.out", script});
  REQUIRE_MESSAGE(submitted.status == 0, submitted.output);
  std::string id = std::string(trim(submitted.output));
  REQUIRE_MESSAGE(std::regex_match(id, std::regex("[0-9]+")), "sbatch printed: " << submitted.output);
  return id;
}

bool job_running(const TestCluster& cluster, const std::string& job) {
  CommandOutput queued = cluster.exec("ctl", {"squeue", "-h", "-j", job, "-o", "%T"});
  return std::string(trim(queued.output)) == "RUNNING" || std::string(trim(queued.output)) == "PENDING" ||
         std::string(trim(queued.output)) == "CONFIGURING" || std::string(trim(queued.output)) == "COMPLETING";
}

bool wait_for(const std::function<bool()>& done, int timeout_ms) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (std::chrono::steady_clock::now() < deadline) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  return done();
}

int files_named(const std::string& dir, const std::string& prefix) {
  int count = 0;
  if (!std::filesystem::exists(dir)) return 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().filename().string().rfind(prefix, 0) == 0) ++count;
  }
  return count;
}

std::string run_dir_of(const SlurmJobDir& dir) {
  std::string runs = dir.path + "/home/runs";
  if (!std::filesystem::exists(runs)) return "";
  for (const auto& entry : std::filesystem::directory_iterator(runs)) return entry.path().string();
  return "";
}

// Processes in a cgroup tree (every cgroup.procs under it).
int processes_in_cgroup_tree(const std::string& dir) {
  int count = 0;
  if (!std::filesystem::exists(dir)) return 0;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(dir)) {
    if (entry.path().filename() != "cgroup.procs") continue;
    std::string procs = read_text(entry.path().string());
    for (char c : procs) count += c == '\n';
  }
  return count;
}

// After the job: no process but sshd and slurmd on any node, no process in the job's cgroup on
// any node (proctrack/cgroup: slurm_<node>/uid_0/job_<id>), and that cgroup removed by Slurm on
// every node but `killed_node` (its slurmstepd died with it: nobody is left to remove it there).
void check_nodes_clean(const TestCluster& cluster, const std::string& job, const std::string& killed_node = "") {
  for (const ClusterHost& host : cluster.hosts()) {
    bool clean = wait_for(
        [&] {
          for (pid_t pid : cluster.pids_in_namespace(host.name)) {
            std::string comm = std::string(trim(read_text("/proc/" + std::to_string(pid) + "/comm")));
            if (comm != "sshd" && comm != "slurmd") return false;
          }
          return true;
        },
        15000);
    std::string left;
    for (pid_t pid : cluster.pids_in_namespace(host.name)) {
      left += " " + std::string(trim(read_text("/proc/" + std::to_string(pid) + "/comm")));
    }
    CHECK_MESSAGE(clean, host.name << " still runs:" << left);
    std::string job_cgroup = "/sys/fs/cgroup/freezer/dtc-" + host.name + "/slurm_" + host.name + "/uid_0/job_" + job;
    CHECK_MESSAGE(processes_in_cgroup_tree(job_cgroup) == 0, job_cgroup << " still holds processes");
    if (host.name != killed_node) {
      bool released = wait_for([&] { return !std::filesystem::exists(job_cgroup); }, 15000);
      CHECK_MESSAGE(released, job_cgroup << " is still there");
    }
  }
}

std::string slurm_output(const SlurmJobDir& dir, const std::string& job) {
  return read_text(dir.path + "/slurm-" + job + ".out");
}

}  // namespace

TEST_CASE("sbatch on 3 nodes: hosts from the allocation, one srun step, USR1 checkpoints every rank at one step") {
  TestCluster cluster(3, {"--slurm"});
  DTRAIN_REQUIRE_CLUSTER(cluster);
  SlurmJobDir dir;
  std::string job = submit_batch(cluster, dir, "", "600");
  // Every rank of generation 0 is training (each wrote its started file)...
  bool started = wait_for([&] { return files_named(dir.path, "started-") == 6; }, 60000);
  REQUIRE_MESSAGE(started, "ranks started: " << files_named(dir.path, "started-") << "\n" << slurm_output(dir, job));
  // ...and has beaten at least once more, so the supervisor knows how fast steps go.
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  CommandOutput signalled = cluster.exec("ctl", {"scancel", "--signal=USR1", "--batch", job});
  REQUIRE_MESSAGE(signalled.status == 0, signalled.output);
  bool ended = wait_for([&] { return !job_running(cluster, job); }, 90000);
  REQUIRE_MESSAGE(ended, "the job did not end:\n" << slurm_output(dir, job));

  std::string output = slurm_output(dir, job);
  INFO("slurm output:\n" << output);
  CHECK(output.find("succeeded") != std::string::npos);
  // The hosts dtrain ran on are the allocation's, as scontrol expands its node list.
  std::string run_dir = run_dir_of(dir);
  REQUIRE(!run_dir.empty());
  std::string spec = read_text(run_dir + "/spec.yaml");
  std::string hostnames = read_text(dir.path + "/hostnames");
  for (const ClusterHost& host : cluster.hosts()) {
    CHECK(hostnames.find(host.name) != std::string::npos);
    CHECK(spec.find("name: \"" + host.name + "\", slots: 2") != std::string::npos);
  }
  CHECK(spec.find("transport: srun") != std::string::npos);
  std::string supervisor_log = read_text(run_dir + "/supervisor.log");
  CHECK(supervisor_log.find("srun step of 3 hosts") != std::string::npos);

  // Every rank saved the same step, named in the checkpoint.requested event.
  std::vector<nlohmann::json> events = read_events(run_dir + "/events.jsonl");
  std::vector<nlohmann::json> requested = events_named(events, "checkpoint.requested");
  REQUIRE(requested.size() == 1);
  CHECK(requested[0]["ranks"] == 6);
  int64_t step = requested[0]["step"].get<int64_t>();
  std::string step_dir = dir.path + "/ckpt/step-" + std::to_string(step);
  CHECK_MESSAGE(files_named(step_dir, "rank-") == 6, "ranks that saved step " << step << ": "
                                                                               << files_named(step_dir, "rank-"));
  CHECK(files_named(dir.path + "/ckpt", "step-") == 1);
  CHECK(read_text(step_dir + "/rank-0").find("SIGUSR1") != std::string::npos);
  std::vector<nlohmann::json> finished = events_named(events, "run.finished");
  REQUIRE(finished.size() == 1);
  CHECK(finished[0]["state"] == "succeeded");
  check_nodes_clean(cluster, job);
}

TEST_CASE("sbatch on 3 nodes: a node killed mid-run is lost and the run goes on with the other two") {
  TestCluster cluster(3, {"--slurm"});
  DTRAIN_REQUIRE_CLUSTER(cluster);
  SlurmJobDir dir;
  // About 15 s of steps: generation 1 runs them from the start again (no checkpoints here).
  std::string job = submit_batch(cluster, dir, "--nnodes 2:3 --max-restarts 1 --set heartbeat.timeout=3s", "300");
  bool started = wait_for([&] { return files_named(dir.path, "started-") == 6; }, 60000);
  REQUIRE_MESSAGE(started, "ranks started: " << files_named(dir.path, "started-") << "\n" << slurm_output(dir, job));
  CommandOutput killed = cluster.kill(3);  // everything on the node: slurmd, agent, workers
  REQUIRE_MESSAGE(killed.status == 0, killed.output);
  bool ended = wait_for([&] { return !job_running(cluster, job); }, 120000);
  REQUIRE_MESSAGE(ended, "the job did not end:\n" << slurm_output(dir, job));

  std::string output = slurm_output(dir, job);
  INFO("slurm output:\n" << output);
  std::string run_dir = run_dir_of(dir);
  REQUIRE(!run_dir.empty());
  std::vector<nlohmann::json> events = read_events(run_dir + "/events.jsonl");
  std::vector<nlohmann::json> lost = events_named(events, "host.lost");
  REQUIRE(!lost.empty());
  CHECK(lost[0]["host"] == cluster.host(3).name);
  // Generation 1 ran its 4 ranks on the two nodes left.
  CHECK(files_named(dir.path, "started-") == 6 + 4);
  std::vector<nlohmann::json> finished = events_named(events, "run.finished");
  REQUIRE(finished.size() == 1);
  CHECK(finished[0]["state"] == "succeeded");
  // The dead node's processes died with it; the others are clean.
  cluster.restart(3);
  check_nodes_clean(cluster, job, cluster.host(3).name);
}

TEST_CASE("dtrain hosts in an allocation: every node checked through one srun step, and why one was refused") {
  TestCluster cluster(3, {"--slurm"});
  DTRAIN_REQUIRE_CLUSTER(cluster);
  SlurmJobDir dir;
  std::string spec = dir.path + "/hosts.yaml";
  std::ofstream(spec) << "version: 1\nhosts: slurm\nworker:\n  command: [/bin/true]\n";
  CommandOutput checked = cluster.exec("ctl", {"salloc", "-Q", "-N3", DTRAIN_EXE, "hosts", "--json", spec});
  INFO(checked.output);
  REQUIRE(checked.status == 0);
  nlohmann::json report = nlohmann::json::parse(checked.output.substr(checked.output.find('{')), nullptr, false);
  REQUIRE(report.is_object());
  REQUIRE(report["hosts"].size() == 3);
  for (const nlohmann::json& host : report["hosts"]) {
    CHECK(host["via"] == "srun");
    CHECK(host["ok"] == true);
  }
  // A node list naming a node outside the allocation (as a stale SLURM_JOB_NODELIST would):
  // srun cannot start there, and every host says so, with srun's own words.
  std::string hosts = cluster.host(1).name + "," + cluster.host(2).name;
  std::string all = cluster.host(1).name + "," + cluster.host(2).name + "," + cluster.host(3).name;
  CommandOutput refused = cluster.exec(
      "ctl", {"salloc", "-Q", "-N2", "-w", hosts, "env", "SLURM_JOB_NODELIST=" + all, "SLURM_TASKS_PER_NODE=1(x3)",
              DTRAIN_EXE, "hosts", spec});
  INFO(refused.output);
  CHECK(refused.status == 3);
  CHECK(refused.output.find("(via srun)") != std::string::npos);
  CHECK(refused.output.find("srun: error") != std::string::npos);
}
