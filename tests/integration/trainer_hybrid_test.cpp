// dtrain-train in hybrid layouts, launched by the real `dtrain submit` on localhost (real plan,
// real environment, real Gloo groups): tensor, pipeline and data parallelism must not change
// the math beyond float summation order; stop and resume at one layout must not change a bit;
// a resume at another tensor or pipeline size is refused, one with fewer replicas is not; with
// no batch in the spec any number of ranks trains.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "tests/integration/dtrain_runner.h"
#include "tests/skip.h"

using namespace dtrain::testing;

namespace {

struct Layout {
  int tensor = 1;
  int pipeline = 1;
  int world = 1;  ///< slots on localhost; data = world / (tensor × pipeline)
};

std::string describe(const Layout& layout) {
  return "tensor " + std::to_string(layout.tensor) + " x pipeline " + std::to_string(layout.pipeline) + " x data " +
         std::to_string(layout.world / (layout.tensor * layout.pipeline));
}

/// Four hidden layers' worth of pairs: stage 1 holds a column+row pair too, and the classifier
/// is row-parallel, so every kind of split and both tensor allreduces run on both stages.
std::string spec(const std::string& name, const Layout& layout, int steps, const std::string& extra = "") {
  return "version: 1\nname: " + name + "\nslots_per_host: " + std::to_string(layout.world) +
         "\nworker:\n  command: [dtrain-train, --layers, \"3\", --steps, \"" + std::to_string(steps) +
         "\", --log-every, \"20\"]\n  backend: gloo\n"
         "parallelism: {tensor: " + std::to_string(layout.tensor) + ", pipeline: " + std::to_string(layout.pipeline) +
         "}\nheartbeat: {interval: 200ms, timeout: 5s, hang_timeout: 20s}\nstop_grace: 2s\n" + extra;
}

struct Finished {
  int exit_code = -1;
  std::vector<std::string> logs;   ///< by rank
  std::vector<std::string> finals; ///< "dtrain-train: final ..." by rank ("" when absent)
  std::string output;              ///< dtrain's stdout + stderr
};

std::string final_line(const std::string& log) {
  size_t at = log.rfind("dtrain-train: final");
  return at == std::string::npos ? "" : log.substr(at, log.find('\n', at) - at);
}

double final_loss(const std::string& line) {
  size_t at = line.find("loss=");
  REQUIRE_MESSAGE(at != std::string::npos, "no final loss in '" << line << "'");
  return std::atof(line.c_str() + at + 5);
}

/// Submits `yaml` in its own DTRAIN_HOME and waits for the end; every rank's log is read and
/// nothing of the run may be left.
Finished submit(const std::string& yaml, int world) {
  DtrainEnv env;
  DtrainProcess process = env.run({"submit", env.write_spec("job.yaml", yaml)}, 120'000);
  Finished result;
  result.exit_code = process.exit_code;
  result.output = process.out() + process.err();
  REQUIRE_MESSAGE(env.run_dirs().size() == 1, "dtrain exit " << result.exit_code << ": " << result.output);
  std::string dir = env.run_dirs().at(0);
  for (int rank = 0; rank < world; ++rank) {
    result.logs.push_back(read_text(dir + "/ranks/" + std::to_string(rank) + ".log"));
    result.finals.push_back(final_line(result.logs.back()));
  }
  check_nothing_left(run_id_of(dir));
  return result;
}

/// Submits and requires success: every rank ends with the same loss (they all learn it).
Finished train(const std::string& yaml, int world) {
  Finished result = submit(yaml, world);
  REQUIRE_MESSAGE(result.exit_code == 0, result.output << "\nrank 0:\n" << result.logs.at(0));
  for (int rank = 0; rank < world; ++rank) {
    CAPTURE(rank);
    REQUIRE_MESSAGE(!result.finals[rank].empty(), result.logs[rank]);
    CHECK(final_loss(result.finals[rank]) == final_loss(result.finals[0]));
  }
  return result;
}

}  // namespace

TEST_CASE("hybrid: DP 4, TP 2 x DP 2, PP 2 x DP 2 and TP 2 x PP 2 end within 1e-5 of one rank") {
  std::string batch = "batch: {global: 64, micro: 4}\n";
  double one = final_loss(train(spec("one", {1, 1, 1}, 60, batch), 1).finals[0]);
  double worst = 0;
  for (Layout layout : {Layout{1, 1, 4}, Layout{2, 1, 4}, Layout{1, 2, 4}, Layout{2, 2, 4}}) {
    CAPTURE(describe(layout));
    Finished run = train(spec("hybrid", layout, 60, batch), layout.world);
    double relative = std::abs(final_loss(run.finals[0]) - one) / one;
    MESSAGE(describe(layout) << ": final loss " << final_loss(run.finals[0]) << " vs one rank " << one
                             << ", relative difference " << relative);
    CHECK(relative <= 1e-5);
    worst = std::max(worst, relative);
    // Replicas of a shard hold the same parameters (ranks are TP fastest, then DP, then PP).
    int model = layout.tensor * layout.pipeline, data = layout.world / model;
    for (int rank = 0; rank < layout.world; ++rank) {
      int tp = rank % layout.tensor, pp = rank / (layout.tensor * data);
      CAPTURE(rank);
      CHECK(run.finals[rank] == run.finals[pp * layout.tensor * data + tp]);
    }
    std::string header = "world 4 (dp " + std::to_string(data) + " x pp " + std::to_string(layout.pipeline) +
                         " x tp " + std::to_string(layout.tensor) + "), backend gloo, global batch 64 = " +
                         std::to_string(data) + " x micro 4 x accum " + std::to_string(16 / data);
    CHECK_MESSAGE(run.logs[0].find(header) != std::string::npos, run.logs[0]);
    if (layout.pipeline > 1) CHECK(run.logs[0].find("pipeline stage 0 of 2: idle") != std::string::npos);
  }
  MESSAGE("largest relative difference from one rank: " << worst);
  CHECK(one < 1.5);  // it learned (the first step's loss is above 3)
}

TEST_CASE("hybrid: TP 2 x PP 2 stopped at a checkpoint and resumed ends bit-identical, every shard") {
  TempDir dirs;
  std::string straight_dir = "checkpoint: {dir: " + dirs.path + "/straight, interval_steps: 20}\n";
  std::string stopped_dir = "checkpoint: {dir: " + dirs.path + "/stopped, interval_steps: 20}\n";
  Finished straight = train(spec("straight", {2, 2, 4}, 60, straight_dir), 4);
  Finished first_half = train(spec("first", {2, 2, 4}, 30, stopped_dir), 4);
  CHECK(first_half.finals[0] != straight.finals[0]);
  Finished resumed = train(spec("resumed", {2, 2, 4}, 60, stopped_dir), 4);
  for (int rank = 0; rank < 4; ++rank) {
    CAPTURE(rank);
    CHECK(resumed.logs[rank].find("resumed from checkpoint step-20") != std::string::npos);
    CHECK(resumed.finals[rank] == straight.finals[rank]);  // loss and the shard's checksum
  }
}

TEST_CASE("hybrid: a resume at another tensor or pipeline size is refused, one with fewer replicas is not") {
  TempDir dirs;
  std::string checkpoint = "checkpoint: {dir: " + dirs.path + "/ckpt, interval_steps: 20}\n";
  Finished straight = train(spec("straight", {2, 1, 4}, 60, "checkpoint: {dir: " + dirs.path + "/other, interval_steps: 20}\n"), 4);
  (void)train(spec("first", {2, 1, 4}, 30, checkpoint), 4);

  Finished other_layout = submit(spec("pipelined", {1, 2, 4}, 60, checkpoint), 4);
  CHECK(other_layout.exit_code != 0);
  std::string all_logs;
  for (const std::string& log : other_layout.logs) all_logs += log;
  CHECK_MESSAGE(all_logs.find("checkpoint step-20 in '" + dirs.path + "/ckpt' was written by a job of tensor 2 x "
                              "pipeline 1, but this job runs tensor 1 x pipeline 2; dtrain-train cannot reshard") !=
                    std::string::npos,
                all_logs);
  CHECK(all_logs.find("resume with parallelism.tensor: 2 and parallelism.pipeline: 1") != std::string::npos);

  // Half the replicas, the same shards: tensor 2 x data 1 keeps the global batch by accumulation.
  Finished shrunk = train(spec("shrunk", {2, 1, 2}, 60, checkpoint), 2);
  CHECK(shrunk.logs[0].find("resumed from checkpoint step-20") != std::string::npos);
  CHECK(shrunk.logs[0].find("global batch 64 = 1 x micro 8 x accum 8") != std::string::npos);
  double relative = std::abs(final_loss(shrunk.finals[0]) - final_loss(straight.finals[0])) / final_loss(straight.finals[0]);
  MESSAGE("resumed at data 1 after data 2: relative difference " << relative);
  CHECK(relative <= 1e-5);
}

TEST_CASE("hybrid: with no batch in the spec, 2 and 6 ranks train and the first line says which batch") {
  for (auto [world, expected] : {std::pair{2, "global batch 64 = data 2 x micro 8 x accum 4"},
                                 std::pair{6, "global batch 48 = data 6 x micro 8 x accum 1"}}) {
    CAPTURE(world);
    std::string yaml = "version: 1\nname: defaults\nslots_per_host: " + std::to_string(world) +
                       "\nworker:\n  command: [dtrain-train, --steps, \"30\"]\n  backend: gloo\n";
    Finished run = train(yaml, world);
    // The rank log opens with the launcher's "=== dtrain generation 0 ..." line; then the trainer's.
    std::string log = run.logs[0].substr(run.logs[0].find("===") == 0 ? run.logs[0].find('\n') + 1 : 0);
    std::string first_line = log.substr(0, log.find('\n'));
    CHECK(first_line.find("dtrain-train: no batch in the spec or flags: " + std::string(expected)) != std::string::npos);
  }
}

// Last in this file: a skip ends the process (tests/skip.h).
TEST_CASE("hybrid: TP 2 x PP 2 on NCCL matches Gloo's final loss within 1e-5 (skips without 4 GPUs)") {
  // One GPU per rank: NCCL refuses two ranks of a communicator on one device.
  dtrain::testing::require_gpus(4, "hybrid TP 2 x PP 2 on NCCL");
  std::string batch = "batch: {global: 64, micro: 4}\n";
  std::string gloo_yaml = spec("gloo", {2, 2, 4}, 60, batch);
  std::string nccl_yaml = gloo_yaml;
  nccl_yaml.replace(nccl_yaml.find("backend: gloo"), 13, "backend: nccl");
  double gloo = final_loss(train(gloo_yaml, 4).finals[0]);
  Finished nccl = train(nccl_yaml, 4);
  CHECK(nccl.logs[0].find("backend nccl") != std::string::npos);
  double relative = std::abs(final_loss(nccl.finals[0]) - gloo) / gloo;
  MESSAGE("TP 2 x PP 2 on NCCL: relative difference from Gloo " << relative);
  CHECK(relative <= 1e-5);
}
