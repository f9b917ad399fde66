// The agent's workers: starting them (spawn, with their files and the Python bootstrap), and the
// warm standbys that a spawn may assign instead of starting a process (agent_loop.h).

#include <unistd.h>

#include <algorithm>
#include <string>
#include <utility>

#include "launcher/agent/agent_loop.h"
#include "launcher/agent/flight_recorder.h"
#include "launcher/agent/process_tree.h"
#include "worker/contract/env.h"

namespace dtrain::agent::detail {

void Agent::on(const proto::SpawnRequest& spawn) {
  WorkerLaunch common;
  common.gen = spawn.gen;
  common.workdir = spawn.workdir.value_or(common.workdir);
  if (spawn.log_tail_lines) {
    common.log_tail_lines = static_cast<size_t>(std::clamp<int64_t>(*spawn.log_tail_lines, 0, kMaxTailLines));
  }
  common.argv = spawn.argv;
  for (const proto::SpawnWorker& worker : spawn.workers) {
    WorkerLaunch launch = common;
    launch.rank = worker.rank;
    launch.local_rank = worker.local_rank;
    // DTRAIN_GENERATION also lets a kill attribute a worker's orphans to their generation.
    launch.env[contract::env::kGeneration] = std::to_string(launch.gen);
    for (const auto& [name, value] : spawn.env) launch.env[name] = value;
    for (const auto& [name, value] : worker.env) launch.env[name] = value;
    launch.env[contract::env::kAgentSocket] = sockets_->path();
    spawn_one(std::move(launch), spawn.instrument);
  }
  // The pool follows the newest spawn; standbys started from an older one stay (assign gives
  // them the whole environment of the worker they become).
  if (spawn.standby.value_or(0) > 0) {
    standbys_.launch = common;
    for (const auto& [name, value] : spawn.env) standbys_.launch.env[name] = value;
    standbys_.instrument = spawn.instrument;
    standbys_.bootstrap_imports = spawn.standby_bootstrap;
  }
  if (spawn.standby) standbys_.wanted = *spawn.standby;  // absent: as before
  // A pool's (re)fill waits for this generation to beat: at a first start there is nothing to
  // take yet, and its imports would slow every rank's own.
  if (standbys_.bootstrap_imports) standbys_.refill_wait_until_ms = now_ms() + kPoolRefillMaxWaitMs;
  keep_standbys(now_ms());
}

int Agent::standby_count() const {
  return static_cast<int>(std::count_if(workers_.begin(), workers_.end(),
                                        [](const auto& entry) { return entry.second->standby(); }));
}

int64_t Agent::next_standby_start_ms() const {
  if (!standbys_.bootstrap_imports || now_ms() >= standbys_.refill_wait_until_ms) return standby_not_before_ms_;
  for (const auto& [pid, worker] : workers_) {
    if (!worker->standby() && !beaten_.count({worker->gen(), worker->rank()})) {
      return std::max(standby_not_before_ms_, standbys_.refill_wait_until_ms);
    }
  }
  return standby_not_before_ms_;
}

void Agent::keep_standbys(int64_t now) {
  if (fence_reason_ || !sockets_ || standby_count() >= standbys_.wanted || now < next_standby_start_ms()) return;
  for (int missing = standbys_.wanted - standby_count(); missing > 0; --missing) {
    WorkerLaunch launch = standbys_.launch;
    launch.standby = true;
    launch.rank = -1;
    launch.local_rank = -1;
    launch.env.erase(contract::env::kGeneration);  // it belongs to none until assigned
    launch.env[contract::env::kStandby] = "1";
    if (standbys_.bootstrap_imports) {
      // An unmodified script: the bootstrap (sitecustomize) imports these, then waits for the
      // assign before Python runs the script; it pops both variables then.
      launch.env[contract::env::kStandby] = contract::env::kStandbyInBootstrap;
      std::string imports;
      for (const std::string& name : *standbys_.bootstrap_imports) imports += (imports.empty() ? "" : ",") + name;
      launch.env[contract::env::kStandbyImports] = imports;
    }
    launch.env[contract::env::kAgentSocket] = sockets_->path();
    add_bootstrap_path(launch, standbys_.instrument);
    last_standby_start_ms_ = now;
    auto spawned = WorkerProcess::spawn(launch);
    if (!spawned) {
      std::fprintf(stderr, "%s: cannot start a standby: %s\n", who().c_str(), spawned.error().message.c_str());
      standby_not_before_ms_ = now + kStandbyRestartMs;
      return;
    }
    pid_t pid = (*spawned)->pid();
    workers_[pid] = std::move(*spawned);
  }
}

bool Agent::assign_standby(const WorkerLaunch& launch) {
  for (auto& [pid, worker] : workers_) {
    if (!worker->standby() || worker->signalled_by_agent || !sockets_->standby_ready(pid)) continue;
    std::optional<char> state = process_state(pid);
    if (!state || *state == 'Z') continue;  // dead, not reaped yet
    // What a new process would have had (spawn_one's env, PATH as build_environment makes it);
    // the standby sets it over its own environment.
    proto::StandbyAssign assign{launch.gen, launch.rank, launch.env};
    assign.env["PATH"] = worker_path_for(launch);
    assign.env.erase(contract::env::kStandby);
    assign.env.erase(contract::env::kStandbyImports);
    if (Status sent = sockets_->assign_standby(pid, assign); !sent) {
      std::fprintf(stderr, "%s: %s; starting rank %d as a new process\n", who().c_str(), sent.error().message.c_str(),
                   launch.rank);
      return false;
    }
    worker->assign(launch);
    out_.send(proto::WorkerStartedReport{launch.gen, launch.rank, pid, launch.local_rank, agent_time_ms(), true});
    update_sampled_workers();
    // Refilled a moment later, not now: starting a process here would delay this started report
    // (fork in this loop) and a Python standby's imports would compete with the recovery's state
    // transfer for the CPUs (kill -9 of 1 of 4 DDP ranks: 149-190 ms to the first step with an
    // immediate refill, 125-133 ms with this).
    standby_not_before_ms_ = std::max(standby_not_before_ms_, now_ms() + kStandbyRefillDelayMs);
    if (standbys_.bootstrap_imports) standbys_.refill_wait_until_ms = now_ms() + kPoolRefillMaxWaitMs;
    return true;
  }
  return false;
}

// Next to the socket: `<runtime dir>/<host>.files`. Without it the workers still run (no
// bootstrap, no error file): a full /tmp must not stop training, but it is said once here.
void Agent::open_worker_files() {
  std::string socket = sockets_->path();
  std::string stem = socket.size() > 5 && socket.compare(socket.size() - 5, 5, ".sock") == 0
                         ? socket.substr(0, socket.size() - 5) : socket;
  auto files = WorkerFiles::create(stem + ".files");
  if (!files) {
    std::fprintf(stderr, "%s: %s; workers run without dtrain's Python bootstrap and error files\n",
                 who().c_str(), files.error().message.c_str());
    return;
  }
  files_.emplace(std::move(*files));
}

// TORCHELASTIC_ERROR_FILE per rank, as torchrun sets it (torch's @record and the bootstrap write
// it; reap_children reads it), and the bootstrap first on PYTHONPATH when instrumenting.
void Agent::add_worker_files(WorkerLaunch& launch, bool instrument) {
  if (!files_) return;
  std::string error_file = files_->error_file(launch.gen, launch.rank);
  ::unlink(error_file.c_str());  // a record left by an earlier worker is not this one's
  launch.env["TORCHELASTIC_ERROR_FILE"] = error_file;
  add_hang_evidence_env(launch.env, files_->flight_recorder_prefix(launch.gen));
  add_bootstrap_path(launch, instrument);
}

void Agent::add_bootstrap_path(WorkerLaunch& launch, bool instrument) {
  if (!files_ || !instrument) return;
  auto given = launch.env.find("PYTHONPATH");
  const char* inherited = std::getenv("PYTHONPATH");
  launch.env["PYTHONPATH"] = prepend_python_path(
      files_->python_path(), given != launch.env.end() ? given->second : inherited ? inherited : "");
}

void Agent::spawn_one(WorkerLaunch launch, bool instrument) {
  auto refuse = [&](const std::string& why) { out_.send(proto::WorkerSpawnFailedReport{launch.gen, launch.rank, why}); };
  // Checked before add_worker_files, which clears the (gen, rank) error file: a refused spawn
  // must not touch the files of the worker it collides with.
  if (auto moved = moved_generations_.find(launch.gen); moved != moved_generations_.end()) {
    return refuse("generation " + std::to_string(launch.gen) + " was carried over to generation " +
                  std::to_string(moved->second) + " (gen_changed); it takes no new workers");
  }
  for (const auto& [pid, worker] : workers_) {
    if (worker->gen() == launch.gen && worker->rank() == launch.rank) {
      return refuse("rank " + std::to_string(launch.rank) + " of generation " + std::to_string(launch.gen) +
                    " is already running (pid " + std::to_string(pid) + ")");
    }
  }
  add_worker_files(launch, instrument);
  auto join_live = launch.env.find(contract::env::kJoinLive);
  // A pool of an unmodified script serves every spawn (first start, restarts, replacements);
  // script standbys (elastic.standby_per_host) only join-live replacements, as before.
  bool takes_standby = standbys_.bootstrap_imports || (join_live != launch.env.end() && join_live->second == "1");
  if (takes_standby && assign_standby(launch)) return;
  auto spawned = WorkerProcess::spawn(launch);
  if (!spawned) {
    std::fprintf(stderr, "%s: rank %d: %s\n", who().c_str(), launch.rank,
                 spawned.error().message.c_str());
    return refuse(spawned.error().message);
  }
  pid_t pid = (*spawned)->pid();
  out_.send(proto::WorkerStartedReport{launch.gen, launch.rank, pid, launch.local_rank, agent_time_ms()});
  workers_[pid] = std::move(*spawned);
  update_sampled_workers();
}

}  // namespace dtrain::agent::detail
