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

namespace {

/// A finished run of job "big" on gpu01 and gpu02 (world size 16) whose ranks stepped in
/// `step_ms`, as a run directory that `dtrain registry rebuild` reads.
void write_earlier_run(const std::string& home, const std::string& id, const std::string& day, double step_ms) {
  std::string dir = home + "/runs/" + id;
  std::filesystem::create_directories(dir);
  std::string events = "{\"dtrain_events\":1,\"run_id\":\"" + id + "\",\"created\":\"" + day + "T10:00:00.000Z\"}\n";
  auto line = [&](const std::string& time, nlohmann::json body) {
    body["ts"] = day + "T" + time + ".000Z";
    events += body.dump() + "\n";
  };
  line("10:00:00", {{"ev", "run.submitted"}, {"name", "big"}, {"hosts", {"gpu01", "gpu02"}}, {"world_size", 16}});
  line("10:00:10", {{"ev", "plan.generation"}, {"gen", 0}, {"hosts", {"gpu01", "gpu02"}}, {"world_size", 16}});
  line("10:00:11", {{"ev", "generation.spawned"}, {"gen", 0}, {"master_addr", "gpu01"}, {"master_port", 29500},
                    {"backend", "nccl"}, {"resume_step", -1}});
  line("11:00:00", {{"ev", "run.finished"}, {"state", "succeeded"}, {"exit_code", 0}});
  write_text(dir + "/events.jsonl", events);
  std::string metrics;
  for (int i = 0; i < 3; ++i) {
    nlohmann::json ranks = nlohmann::json::array();
    for (int rank = 0; rank < 16; ++rank) ranks.push_back({{"rank", rank}, {"step", 10 * i}, {"step_ms", step_ms}});
    metrics += nlohmann::json({{"ts", day + "T10:0" + std::to_string(i + 1) + ":00.000Z"}, {"gen", 0}, {"ranks", ranks}}).dump() + "\n";
  }
  write_text(dir + "/metrics.jsonl", metrics);
}

}  // namespace

TEST_CASE("plan --advise: the expected time to the target from the step time of the job's earlier runs") {
  DtrainEnv env;
  // 9,216,000 samples / 512 a step = 18,000 steps; at the earlier runs' median of 600 ms, 3 h.
  std::string spec = env.write_spec("job.yaml", "version: 1\nname: big\nhosts: [gpu01, gpu02]\nslots_per_host: 8\n"
                                                "worker:\n  command: [python3, train.py]\nbatch: {global: 512}\n"
                                                "intent:\n  model: {parameters: 1B}\n  data: {samples: 9216000}\n"
                                                "  target_duration: 2h\n");
  DtrainProcess first = env.run({"plan", spec, "--advise", "--gpu-memory", "80GB"});
  REQUIRE_MESSAGE(first.exit_code == 0, first.err());
  CHECK_MESSAGE(first.out().find("target time   unknown: no registry to find earlier runs in") != std::string::npos, first.out());
  CHECK(first.out().find("run the job once, or give --step-time") != std::string::npos);
  CHECK(first.out().find("  steps       9216000 samples (intent.data.samples) / 512 a step (batch.global) = 18000 steps") !=
        std::string::npos);

  write_earlier_run(env.home(), "big-a", "2026-11-02", 500);
  write_earlier_run(env.home(), "big-b", "2026-11-03", 700);
  DtrainProcess rebuilt = env.run({"registry", "rebuild"});
  REQUIRE_MESSAGE(rebuilt.exit_code == 0, rebuilt.err());

  DtrainProcess text = env.run({"plan", spec, "--advise", "--gpu-memory", "80GB"});
  REQUIRE_MESSAGE(text.exit_code == 0, text.err());
  INFO(text.out());
  CHECK(text.out().find("target time   misses the target 2h by 1h00m (expected 3h00m)\n") != std::string::npos);
  CHECK(text.out().find("median of 2 earlier run(s) of 'big' at world size 16 in the registry (big-b 700ms, big-a 500ms") !=
        std::string::npos);

  nlohmann::json json = advise_json(env, spec);
  INFO(json.dump(2));
  CHECK(json["target_time"]["steps"] == 18000);
  CHECK(json["target_time"]["step_seconds"].get<double>() == doctest::Approx(0.6));
  CHECK(json["target_time"]["expected_seconds"].get<double>() == doctest::Approx(10800));
  CHECK(json["target_time"]["meets_target"] == false);
  CHECK(json["target_time"]["step_source"].get<std::string>().find("big-b 700ms, big-a 500ms") != std::string::npos);

  // --step-time wins over the registry, and says so.
  DtrainProcess declared = env.run({"plan", spec, "--advise", "--gpu-memory", "80GB", "--step-time", "300ms"});
  REQUIRE(declared.exit_code == 0);
  CHECK_MESSAGE(declared.out().find("target time   meets the target 2h (expected 1h30m, 30m00s to spare)") != std::string::npos,
                declared.out());
  CHECK(declared.out().find("  step time   300.0ms: --step-time") != std::string::npos);
}
