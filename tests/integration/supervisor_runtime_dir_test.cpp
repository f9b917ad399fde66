// Another user's runtime base does not stop a submit (issue 26): the base the supervisor asks for
// (DTRAIN_RUNTIME_BASE here, /tmp/dtrain-<uid> by default; the test plants its blocker in a
// directory of its own, not in the /tmp/dtrain-<uid> every parallel test shares) is owned by uid
// 65534. The supervisor makes a fresh private base next to it (mkdtemp), says so once (a console
// warning and a runtime_dir.fallback event naming the refused directory and its owner), and sends
// that path to its agent whole: the two ranks of the reference trainer meet through the agent's
// socket there, ctl.sock answers `dtrain status`, and at the end the fallback is gone while the
// blocker is untouched.

#include <doctest/doctest.h>

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "tests/integration/dtrain_runner.h"
#include "tests/skip.h"

using namespace dtrain::testing;

namespace {

// Sets an environment variable for this test (and the dtrain it starts), unset at the end.
struct ScopedEnv {
  const char* name;
  ScopedEnv(const char* variable, const std::string& value) : name(variable) { ::setenv(name, value.c_str(), 1); }
  ~ScopedEnv() { ::unsetenv(name); }
};

}  // namespace

TEST_CASE("a runtime base owned by another user: the supervisor uses a private one, says so once, the run trains") {
  if (::geteuid() != 0) skip_test("needs root to create a directory owned by uid 65534");
  DtrainEnv env;
  std::string runtime_parent = env.dir.path + "/rt";
  REQUIRE(::mkdir(runtime_parent.c_str(), 0700) == 0);
  std::string blocker = runtime_parent + "/dtrain-base";
  REQUIRE(::mkdir(blocker.c_str(), 0700) == 0);
  REQUIRE(::chown(blocker.c_str(), 65534, 65534) == 0);
  ScopedEnv base("DTRAIN_RUNTIME_BASE", blocker);

  std::string spec = env.write_spec(
      "rt.yaml", "version: 1\nname: rt\nslots_per_host: 2\n"
                 "worker:\n  command: [dtrain-train, --steps, \"40\", --log-every, \"20\"]\n  backend: gloo\n"
                 "batch: {global: 8, micro: 2}\n"
                 "heartbeat: {interval: 200ms, timeout: 2s, hang_timeout: 10s}\nstop_grace: 1s\n");
  DtrainProcess run = env.start({"submit", spec});
  std::string dir = only_run_dir(env);
  REQUIRE(!dir.empty());
  std::string run_id = run_id_of(dir);
  // While it runs, ctl.sock (in the fallback) answers.
  REQUIRE(wait_until([&] { return rank_pid(dir, 1) > 0; }, 60'000));
  char target[512] = {};
  ssize_t length = ::readlink((dir + "/ctl.sock").c_str(), target, sizeof target - 1);
  REQUIRE(length > 0);
  std::string ctl = std::string(target, static_cast<size_t>(length));
  CHECK(ctl.rfind(blocker + "-", 0) == 0);
  CHECK(env.run({"status", run_id}, 30'000).exit_code == 0);
  REQUIRE(run.wait(120'000));
  CHECK(run.exit_code == 0);
  INFO(run.err());

  auto events = read_events(dir + "/events.jsonl");
  auto fallbacks = events_named(events, "runtime_dir.fallback");
  REQUIRE(fallbacks.size() == 1);
  std::string refused = fallbacks[0]["refused"];
  CHECK_MESSAGE(refused.find("runtime directory '" + blocker + "' belongs to uid 65534") != std::string::npos, refused);
  std::string used = fallbacks[0]["path"];
  CHECK(used.rfind(blocker + "-", 0) == 0);
  CHECK(ctl == used + "/ctl.sock");
  CHECK(events_named(events, "agent.error").empty());  // the agent took the path it was given
  std::string err = run.err();
  size_t warned = err.find("warning: runtime directory '" + blocker + "' belongs to uid 65534");
  CHECK(warned != std::string::npos);
  CHECK(err.find("warning: runtime directory", warned + 1) == std::string::npos);  // once
  CHECK(ranks_final_lines(dir, 2)[0].find("final step=40") != std::string::npos);

  CHECK(std::filesystem::is_empty(blocker));  // nothing of ours in theirs
  std::vector<std::string> left;
  for (const auto& entry : std::filesystem::directory_iterator(runtime_parent)) left.push_back(entry.path().filename());
  CHECK(left == std::vector<std::string>{"dtrain-base"});  // the fallback is removed
  check_nothing_left(run_id);
}
