// The integration tests' own harness (dtrain_runner.h): a test that ends early — a failed
// REQUIRE between starting a job and waiting for it — must not leave that job, or its workers,
// running on the machine. DtrainProcess's destructor stops it (SIGINT, then SIGKILL).

#include <doctest/doctest.h>

#include <signal.h>

#include "tests/integration/dtrain_runner.h"

using namespace dtrain::testing;

TEST_CASE("test harness: a job still running when its DtrainProcess goes out of scope is stopped, workers too") {
  DtrainEnv env;
  std::string spec = env.write_spec("long.yaml",
                                    "version: 1\nname: long\nslots_per_host: 2\n"
                                    "worker:\n  command: [dtrain-train, --steps, \"100000000\", --log-every, \"0\"]\n"
                                    "  backend: gloo\n");
  std::string run_id;
  {
    DtrainProcess run = env.start({"submit", spec});
    std::string dir = only_run_dir(env);
    REQUIRE(!dir.empty());
    REQUIRE(wait_until([&] { return rank_field(dir, 1, "step") >= 1; }, 60000));
    run_id = run_id_of(dir);
    REQUIRE(!processes_of_run(run_id).empty());
  }  // here a failed REQUIRE would have left the scope too
  std::vector<pid_t> left = dtrain::test::wait_until_run_gone(run_id, 5000);
  for (pid_t pid : left) {  // the harness failed: say what survived, then end it
    FAIL_CHECK("survived its DtrainProcess: " << dtrain::test::describe_process(pid));
    ::kill(pid, SIGKILL);
  }
}
