// `dtrain plan SPEC --advise` as a user runs it (issue 30 item 2): a spec listing 2 hosts, its
// intent, 8 GPUs of 80 GB each declared; the text and --json say the same; the checkpoint advice
// follows the registry's failure history of the job's hosts (a registry this test fills with
// known rows, so the interval is computed by hand).

#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "launcher/base/clock.h"
#include "launcher/registry/registry_db.h"
#include "tests/integration/dtrain_runner.h"

using namespace dtrain;
using namespace dtrain::testing;

namespace {

std::string spec_with(const std::string& model) {
  return "version: 1\nname: big\nhosts: [gpu01, gpu02]\nslots_per_host: 8\nworker:\n  command: [python3, train.py]\n"
         "checkpoint: {interval_steps: 500}\nintent:\n  model: " + model + "\n";
}

nlohmann::json advise_json(DtrainEnv& env, const std::string& spec_path) {
  DtrainProcess run = env.run({"plan", spec_path, "--advise", "--gpu-memory", "80GB", "--json"});
  REQUIRE_MESSAGE(run.exit_code == 0, run.err());
  return nlohmann::json::parse(run.out());
}

/// gpu01 held 8 GPUs for 10 hours, 10 days ago, in a run where it was the root cause of
/// `failures` failures.
void fill_registry(const std::string& home, int failures) {
  std::filesystem::create_directories(home);
  Result<registry::RegistryDb> opened = registry::RegistryDb::open(home + "/registry.db", true);
  REQUIRE(opened.ok());
  registry::RegistryDb& db = *opened;
  int64_t start = SystemClock().wall_ms() - 10ll * 24 * 3600 * 1000, end = start + 10ll * 3600 * 1000;
  REQUIRE(db.begin());
  REQUIRE(db.insert_run({"old", "nlp", "alice", "old-job", "", "", start - 60000, start, end, "failed", 1, ""}));
  REQUIRE(db.insert_allocation({"old", 0, "gpu01", 8, "gpu", start, end, "run ended"}));
  for (int i = 0; i < failures; ++i) {
    REQUIRE(db.insert_failure({"old", i, "gpu01", std::nullopt, "host.lost", true, start + (i + 1) * 3600000, 1000}));
  }
  REQUIRE(db.commit());
}

}  // namespace

TEST_CASE("plan --advise: 100M is data parallel, 70B gets TP x PP with its memory per GPU, 1T fits nowhere") {
  DtrainEnv env;
  DtrainProcess small = env.run({"plan", env.write_spec("small.yaml", spec_with("{parameters: 100M}")), "--advise",
                                 "--gpus-per-host", "8", "--gpu-memory", "80GB"});
  REQUIRE_MESSAGE(small.exit_code == 0, small.err());
  CHECK_MESSAGE(small.out().find("recommended   data parallel\n") != std::string::npos, small.out());
  CHECK(small.out().find("model state   1.6 GB") != std::string::npos);
  CHECK(small.out().find("checkpoints   every ") != std::string::npos);
  CHECK(small.out().find("now every 500 steps") != std::string::npos);

  nlohmann::json big = advise_json(env, env.write_spec("big.yaml", spec_with("{parameters: 70B, optimizer: sgd}")));
  INFO(big.dump(2));
  CHECK(big["recommended"] == "TP 4 x PP 2, optimizer state sharded");
  for (const auto& candidate : big["candidates"]) {
    if (candidate["name"] == big["recommended"]) CHECK(candidate["bytes_per_gpu"].get<double>() == doctest::Approx(52.5e9));
  }
  CHECK(big["model_state"]["total_bytes"].get<double>() == doctest::Approx(560e9));

  DtrainProcess huge = env.run({"plan", env.write_spec("huge.yaml", spec_with("{parameters: 1T}")), "--advise", "--gpu-memory", "80GB"});
  REQUIRE(huge.exit_code == 0);
  CHECK_MESSAGE(huge.out().find("recommended   nothing fits") != std::string::npos, huge.out());

  DtrainProcess no_memory = env.run({"plan", env.dir.path + "/small.yaml", "--advise"});
  CHECK(no_memory.exit_code == 2);
  CHECK(no_memory.err().find("--advise needs --gpu-memory") != std::string::npos);
}

TEST_CASE("plan --advise: the checkpoint interval follows the registry's failure history of the job's hosts") {
  DtrainEnv env;
  std::string spec = env.write_spec("job.yaml", spec_with("{parameters: 1B}"));
  nlohmann::json before = advise_json(env, spec);
  CHECK(before["checkpoint"]["mtbf_source"].get<std::string>().find("default") != std::string::npos);
  CHECK(before["checkpoint"]["interval_seconds"].get<double>() == doctest::Approx(std::sqrt(2.0 * 60 * 15 * 86400)));

  // 2 failures in 10 host-hours: an MTBF of 5 h, an interval of sqrt(2 x 60 s x 18000 s).
  fill_registry(env.home(), 2);
  nlohmann::json two = advise_json(env, spec);
  CHECK(two["checkpoint"]["mtbf_seconds"].get<double>() == doctest::Approx(18000));
  CHECK(two["checkpoint"]["interval_seconds"].get<double>() == doctest::Approx(std::sqrt(2.0 * 60 * 18000)));
  CHECK(two["checkpoint"]["mtbf_source"].get<std::string>().find("the registry: 2 root-cause failure(s)") != std::string::npos);

  std::filesystem::remove(env.home() + "/registry.db");
  fill_registry(env.home(), 5);  // more failures: more often
  nlohmann::json five = advise_json(env, spec);
  CHECK(five["checkpoint"]["mtbf_seconds"].get<double>() == doctest::Approx(7200));
  CHECK(five["checkpoint"]["interval_seconds"].get<double>() < two["checkpoint"]["interval_seconds"].get<double>());
}
