// ckpt.request end to end on this machine (no Slurm needed): SIGUSR1 to the supervisor, as
// Slurm's `--signal=B:USR1@T` sends it to the batch step, makes every rank of the reference
// trainer save one checkpoint at the step named in the checkpoint.requested event (or, when the
// request reaches a rank late, at the first step any rank heard it: always the same step on all).

#include <doctest/doctest.h>
#include <signal.h>

#include "tests/integration/dtrain_runner.h"

using namespace dtrain::testing;

namespace {
const std::string kTrainer = DTRAIN_BINARY_DIR "/cli/dtrain-train";
}  // namespace

TEST_CASE("SIGUSR1 to the supervisor: both ranks of dtrain-train save the requested step") {
  DtrainEnv env;
  // Many steps and no interval checkpoints: the only checkpoint can come from the request.
  std::string spec = env.write_spec("job.yaml", "version: 1\nname: ckpt-request\nslots_per_host: 2\n"
                                                "worker:\n  command: [" + kTrainer + ", --steps, \"100000000\"]\n");
  DtrainProcess run = env.start({"submit", spec});
  std::string run_dir = only_run_dir(env);
  REQUIRE(!run_dir.empty());
  // Both ranks are training (past step 100) before the signal.
  bool training = wait_until([&] { return rank_field(run_dir, 0, "step") > 100 && rank_field(run_dir, 1, "step") > 100; },
                             60'000);
  REQUIRE_MESSAGE(training, run.err());
  REQUIRE(::kill(run.pid, SIGUSR1) == 0);
  std::vector<nlohmann::json> committed;
  int64_t requested_step = -1;
  bool saved = wait_until(
      [&] {
        std::vector<nlohmann::json> events = read_events(run_dir + "/events.jsonl");
        std::vector<nlohmann::json> requested = events_named(events, "checkpoint.requested");
        if (requested.empty()) return false;
        requested_step = requested[0]["step"].get<int64_t>();
        committed = events_named(events, "checkpoint.committed");
        return !committed.empty();
      },
      60'000);
  ::kill(run.pid, SIGTERM);  // the run would train on: stop it
  CHECK(run.wait(60'000));
  REQUIRE_MESSAGE(saved, run.err());
  // The step asked for, or (when the request reached a rank only after it, on a loaded machine)
  // the first step at which a rank had heard it: both ranks save that same step, so it commits.
  int64_t saved_step = committed[0]["step"].get<int64_t>();
  CHECK(saved_step >= requested_step);
  for (const char* log : {"/ranks/0.log", "/ranks/1.log"}) {
    CHECK_MESSAGE(read_text(run_dir + log).find("saving step " + std::to_string(saved_step) + " for a checkpoint request") !=
                      std::string::npos,
                  log);
  }
  CHECK((read_text(run_dir + "/ranks/0.log") + read_text(run_dir + "/ranks/1.log")).find("checkpoint requested at step ") !=
        std::string::npos);
  check_nothing_left(run_id_of(run_dir));
}
