// The example specs users copy (configs/examples/) run: the ones that need nothing but this
// machine run here through the real `dtrain submit`, as their comments say to run them. The
// others (SSH hosts with GPUs and their own scripts) only validate (unit/spec_examples_test).
#include <doctest/doctest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "launcher/spec/spec_loader.h"
#include "tests/integration/dtrain_runner.h"
#include "tests/skip.h"

using namespace dtrain::testing;

namespace {

const std::string kExamples = std::string(DTRAIN_SOURCE_DIR) + "/configs/examples/";

std::string final_line(const std::string& log) {
  size_t at = log.rfind("dtrain-train: final");
  return at == std::string::npos ? "" : log.substr(at, log.find('\n', at) - at);
}

std::string loss_of(const std::string& line) {
  size_t at = line.find("loss=");
  return at == std::string::npos ? "" : line.substr(at, line.find(' ', at) - at);
}

}  // namespace

TEST_CASE("examples: tensor-pipeline.yaml trains on localhost at 8 slots (tensor 4 x pipeline 2)") {
  // Its own command, but 10 steps, and a smaller global batch: 512 samples of 128 micro-batches
  // take seconds per step on 8 ranks sharing two cores.
  auto loaded = dtrain::spec::load_job_spec(kExamples + "tensor-pipeline.yaml");
  REQUIRE_MESSAGE(loaded.ok(), loaded.message());
  std::vector<std::string> command = loaded.spec->worker.command;
  std::string flow = "[";
  for (size_t i = 0; i < command.size(); ++i) {
    bool steps_value = i > 0 && command[i - 1] == "--steps";
    flow += (i ? ", " : "") + ("\"" + (steps_value ? std::string("10") : command[i]) + "\"");
  }
  flow += "]";
  DtrainEnv env;
  DtrainProcess run = env.run({"submit", kExamples + "tensor-pipeline.yaml", "--set", "hosts=[localhost]", "--set",
                               "slots_per_host=8", "--set", "batch.global=32", "--set", "worker.command=" + flow,
                               "--set", "worker.backend=gloo"},
                              120'000);
  REQUIRE_MESSAGE(env.run_dirs().size() == 1, run.out() << run.err());
  std::string dir = env.run_dirs().at(0);
  CHECK_MESSAGE(run.exit_code == 0, run.out() << run.err() << read_text(dir + "/ranks/0.log"));
  std::string log0 = read_text(dir + "/ranks/0.log");
  CHECK(log0.find("world 8 (dp 1 x pp 2 x tp 4), backend gloo, global batch 32 = 1 x micro 4 x accum 8") !=
        std::string::npos);
  CHECK(log0.find("stage 0: layers 0-1, stage 1: layers 2-3") != std::string::npos);
  std::string loss = loss_of(final_line(log0));
  CHECK(!loss.empty());
  for (int rank = 1; rank < 8; ++rank) {
    CAPTURE(rank);
    CHECK(loss_of(final_line(read_text(dir + "/ranks/" + std::to_string(rank) + ".log"))) == loss);
  }
  check_nothing_left(run_id_of(dir));
}

TEST_CASE("examples: local-ddp.yaml runs scripts/bench/ddp_train.py on 4 CPU workers") {
  require_python_module("torch.distributed");
  DtrainEnv env;
  // As its comment says: the script next to where dtrain is run, python3 with torch first on PATH.
  REQUIRE(std::system(("cp '" + std::string(DTRAIN_SOURCE_DIR) + "/scripts/bench/ddp_train.py' '" + env.dir.path +
                       "/ddp_train.py'").c_str()) == 0);
  std::string path = std::getenv("PATH") ? std::getenv("PATH") : "";
  ::setenv("PATH", ("/usr/bin:" + path).c_str(), 1);
  DtrainProcess run = env.run({"submit", kExamples + "local-ddp.yaml"}, 120'000);
  ::setenv("PATH", path.c_str(), 1);
  REQUIRE_MESSAGE(env.run_dirs().size() == 1, run.out() << run.err());
  std::string dir = env.run_dirs().at(0);
  CHECK_MESSAGE(run.exit_code == 0, run.out() << run.err() << read_text(dir + "/ranks/0.log"));
  check_nothing_left(run_id_of(dir));
}
