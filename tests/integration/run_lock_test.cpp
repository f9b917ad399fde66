// One supervisor per run (runlog/run_lock.h): `dtrain resume` takes flock on <run>/lock before
// it writes anything, so a second resume of the same run is refused with exit 2, naming the
// first one's pid and host, and leaves the run alone, even while state.json still names a dead
// supervisor; SIGKILL of the holder releases the lock (it is a lock, not a pid file) and a resume
// then finishes the run. A detached supervisor holds the lock itself, and no agent or worker
// inherits it. Real dtrain processes, real signals; nothing of the run is left.

#include <doctest/doctest.h>

#include <dirent.h>
#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <memory>

#include "tests/integration/dtrain_runner.h"

using namespace dtrain::testing;

namespace {

std::string hostname() {
  char name[256] = {};
  ::gethostname(name, sizeof name - 1);
  return name;
}

// Workers that wait until the test creates `release`, then succeed.
std::string waiting_spec(const std::string& release) {
  return "version: 1\nname: locked\nslots_per_host: 2\n"
         "worker:\n  command: [/bin/sh, -c, 'while [ ! -e " + release + " ]; do sleep 0.05; done']\n"
         "heartbeat: {interval: 200ms, timeout: 2s, hang_timeout: 60s}\nstop_grace: 1s\n";
}

bool started_in_generation(const std::string& run_dir, int gen, int workers) {
  int started = 0;
  for (const auto& event : events_named(read_events(run_dir + "/events.jsonl"), "worker.started")) {
    if (event.value("gen", -1) == gen) ++started;
  }
  return started == workers;
}

}  // namespace

TEST_CASE("two dtrain resume of one run: the second exits 2 naming the first, after SIGKILL of the first a resume finishes") {
  DtrainEnv env;
  std::string release = env.dir.path + "/release";
  DtrainProcess submitted = env.start({"submit", env.write_spec("locked.yaml", waiting_spec(release))});
  std::string dir = only_run_dir(env);
  REQUIRE(!dir.empty());
  std::string run_id = run_id_of(dir);
  REQUIRE(wait_until([&] { return started_in_generation(dir, 0, 2); }, 30'000));
  CHECK(read_text(dir + "/lock") == std::to_string(submitted.pid) + " " + hostname() + "\n");

  // The supervisor dies while its agent cannot fence (stopped): a resume must wait for that agent,
  // and state.json still names the dead supervisor, so only the lock can tell a second resume
  // that the first one is already here.
  nlohmann::json facts = nlohmann::json::parse(read_text(dir + "/hosts/localhost.json"), nullptr, false);
  int agent = facts.value("agent_pid", 0);
  REQUIRE(agent > 1);
  REQUIRE(::kill(agent, SIGSTOP) == 0);
  // However the test ends, the stopped agent (and with it its workers) is killed.
  std::unique_ptr<int, void (*)(int*)> kill_agent_at_end(&agent, [](int* pid) { ::kill(*pid, SIGKILL); });
  REQUIRE(::kill(submitted.pid, SIGKILL) == 0);
  REQUIRE(submitted.wait(10'000));

  DtrainProcess first = env.start({"resume", run_id});
  std::string holder = std::to_string(first.pid) + " " + hostname() + "\n";
  bool first_holds = wait_until([&] { return read_text(dir + "/lock") == holder; }, 30'000);
  std::string events_before = read_text(dir + "/events.jsonl");
  DtrainProcess second = env.run({"resume", run_id}, 30'000);
  ::kill(agent, SIGKILL);  // its part is played: now the previous supervisor's agent is gone
  REQUIRE(first_holds);
  CHECK(second.exit_code == 2);
  std::string refusal = second.err();
  CHECK_MESSAGE(refusal.find("run " + run_id + " is still supervised by pid " + std::to_string(first.pid) +
                             " on host " + hostname()) != std::string::npos, refusal);
  CHECK_MESSAGE(refusal.find("`dtrain stop " + run_id + "` ends it, or wait for it to finish") != std::string::npos,
                refusal);
  // Refused before writing anything in the run directory.
  CHECK(read_text(dir + "/events.jsonl") == events_before);
  CHECK(read_text(dir + "/lock") == holder);

  // SIGKILL: no cleanup runs, yet the kernel drops the lock with the process.
  REQUIRE(::kill(first.pid, SIGKILL) == 0);
  REQUIRE(first.wait(10'000));
  CHECK(wait_until([&] { return process_gone(agent) && processes_of_run(run_id).empty(); }, 10'000));

  write_text(release, "");
  DtrainProcess third = env.run({"resume", run_id}, 60'000);
  CHECK(third.exit_code == 0);
  CHECK_MESSAGE(third.err().find("resuming run " + run_id) != std::string::npos, third.err());
  auto events = read_events(dir + "/events.jsonl");
  CHECK(events_named(events, "run.resumed").size() == 1);  // only the one that finished
  CHECK(events_named(events, "run.finished").size() == 1);
  check_nothing_left(run_id);
}

TEST_CASE("a detached supervisor holds the lock itself: a resume is refused naming its pid, not the parent's") {
  DtrainEnv env;
  std::string release = env.dir.path + "/release";
  DtrainProcess parent = env.run({"submit", "--detach", env.write_spec("detached.yaml", waiting_spec(release))}, 30'000);
  REQUIRE(parent.exit_code == 0);
  std::string run_id = parent.out().substr(0, parent.out().find('\n'));
  std::string dir = env.home() + "/runs/" + run_id;
  std::string err = parent.err();
  size_t at = err.find("supervisor pid ");
  REQUIRE_MESSAGE(at != std::string::npos, err);
  int supervisor = std::atoi(err.c_str() + at + 15);
  REQUIRE(supervisor > 1);
  REQUIRE(supervisor != parent.pid);
  // The parent has exited; the child that inherited the lock has named itself as the holder.
  CHECK(wait_until([&] { return read_text(dir + "/lock") == std::to_string(supervisor) + " " + hostname() + "\n"; },
                   10'000));
  DtrainProcess refused = env.run({"resume", run_id}, 30'000);
  CHECK(refused.exit_code == 2);
  CHECK_MESSAGE(refused.err().find("is still supervised by pid " + std::to_string(supervisor) + " on host") !=
                    std::string::npos, refused.err());
  // Neither the agent nor a worker inherited the lock file (it is close-on-exec).
  for (int pid : processes_of_run(run_id)) {
    std::string fds = "/proc/" + std::to_string(pid) + "/fd";
    if (DIR* d = ::opendir(fds.c_str())) {
      while (const dirent* entry = ::readdir(d)) {
        char target[512] = {};
        ssize_t n = ::readlink((fds + "/" + entry->d_name).c_str(), target, sizeof target - 1);
        if (n > 0) CHECK_MESSAGE(std::string(target) != dir + "/lock", "pid " << pid << " holds the lock file");
      }
      ::closedir(d);
    }
  }
  write_text(release, "");
  CHECK(wait_until([&] { return process_gone(supervisor); }, 60'000));
  check_nothing_left(run_id);
}
