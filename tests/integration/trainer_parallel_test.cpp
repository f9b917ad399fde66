// dtrain-train under a fake agent (tests/integration/fake_agent.h): real processes, real Gloo,
// real checkpoints, no launcher. Data parallelism must not change the math; stop/resume must not
// change a single bit.
#include <doctest/doctest.h>

#include <sys/wait.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <regex>

#include "launcher/base/strings.h"
#include "tests/integration/fake_agent.h"
#include "tests/skip.h"

using dtrain::testing::FakeAgent;
using dtrain::testing::TempDir;
using namespace std::chrono_literals;

namespace {

const std::string kTrainer = DTRAIN_BINARY_DIR "/cli/dtrain-train";

struct Final {
  int step = 0;
  double loss = 0;
  std::string checksum;
};

/// Parses "dtrain-train: final step=<N> loss=<x> checksum=<hex>".
Final final_line(const std::string& log) {
  std::smatch match;
  static const std::regex pattern("dtrain-train: final step=(\\d+) loss=([0-9.]+) checksum=([0-9a-f]{16})");
  REQUIRE_MESSAGE(std::regex_search(log, match, pattern), "no final line in:\n" << log);
  return {std::stoi(match[1]), std::stod(match[2]), match[3]};
}

/// "step 20 loss 1.6856 ..." → loss at that step.
double loss_at(const std::string& log, int step) {
  std::smatch match;
  std::regex pattern("\nstep " + std::to_string(step) + " loss ([0-9.]+)");
  std::string text = "\n" + log;
  REQUIRE_MESSAGE(std::regex_search(text, match, pattern), "no step " << step << " in:\n" << log);
  return std::stod(match[1]);
}

/// Runs `world` ranks to completion and returns rank 0's log (all ranks must succeed).
std::string train(int world, std::vector<std::string> flags, std::map<std::string, std::string> env = {}) {
  FakeAgent agent;
  std::vector<std::string> argv{kTrainer};
  argv.insert(argv.end(), flags.begin(), flags.end());
  agent.spawn(world, argv, env);
  bool ok = agent.wait_all_ok(120s);
  for (int rank = 0; rank < world; ++rank) INFO("rank " << rank << ":\n" << agent.log(rank));
  REQUIRE_MESSAGE(ok, "a rank failed; rank 0 log:\n" << agent.log(0) << "\nlast rank log:\n" << agent.log(world - 1));
  std::string log0 = agent.log(0);
  for (int rank = 1; rank < world; ++rank) {
    CHECK(final_line(agent.log(rank)).checksum == final_line(log0).checksum);  // replicas agree
  }
  return log0;
}

}  // namespace

TEST_CASE("trainer: 1, 2 and 4 ranks at one global batch follow the same loss curve, and it falls") {
  std::vector<std::string> flags{"--steps", "60", "--log-every", "20"};
  std::map<std::string, std::string> batch{{"DTRAIN_GLOBAL_BATCH", "64"}, {"DTRAIN_MICRO_BATCH", "8"}};
  std::string one = train(1, flags, batch);
  std::string two = train(2, flags, batch);
  std::string four = train(4, flags, batch);
  Final f1 = final_line(one), f2 = final_line(two), f4 = final_line(four);
  MESSAGE("final loss: 1 rank " << f1.loss << ", 2 ranks " << f2.loss << ", 4 ranks " << f4.loss);
  CHECK(std::abs(f2.loss - f1.loss) / f1.loss <= 1e-4);
  CHECK(std::abs(f4.loss - f1.loss) / f1.loss <= 1e-4);
  for (int step : {1, 20, 40}) {
    CHECK(std::abs(loss_at(two, step) - loss_at(one, step)) <= 2e-4);
    CHECK(std::abs(loss_at(four, step) - loss_at(one, step)) <= 2e-4);
  }
  CHECK(f1.loss < 0.6 * loss_at(one, 1));  // it learns
  CHECK(four.find("world 4 (dp 4 x pp 1 x tp 1), backend gloo, global batch 64 = 4 x micro 8 x accum 2") !=
        std::string::npos);
}

TEST_CASE("trainer: stopped at a checkpoint and resumed, 2 ranks end bit-identical to an uninterrupted run") {
  TempDir dirs;
  std::map<std::string, std::string> env{{"DTRAIN_CKPT_INTERVAL", "20"}};
  env["DTRAIN_CKPT_DIR"] = dirs.path() + "/straight";
  Final straight = final_line(train(2, {"--steps", "60"}, env));

  env["DTRAIN_CKPT_DIR"] = dirs.path() + "/stopped";
  Final first_half = final_line(train(2, {"--steps", "30"}, env));
  CHECK(first_half.checksum != straight.checksum);
  std::string resumed_log = train(2, {"--steps", "60", "--ckpt-async"}, env);
  CHECK(resumed_log.find("resumed from checkpoint step-20") != std::string::npos);
  Final resumed = final_line(resumed_log);
  CHECK(resumed.checksum == straight.checksum);
  CHECK(resumed.loss == straight.loss);
}

TEST_CASE("trainer: a corrupt newest checkpoint is rejected with the reason and the previous one is used") {
  TempDir dirs;
  std::map<std::string, std::string> env{{"DTRAIN_CKPT_INTERVAL", "20"}, {"DTRAIN_CKPT_DIR", dirs.path() + "/ckpt"}};
  Final straight = final_line(train(2, {"--steps", "60"}, {{"DTRAIN_CKPT_INTERVAL", "20"},
                                                           {"DTRAIN_CKPT_DIR", dirs.path() + "/straight"}}));
  (void)train(2, {"--steps", "40"}, env);
  std::string shard = dirs.path() + "/ckpt/step-40/shard-tp0-pp0.bin";
  {
    std::fstream file(shard, std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(1000);
    file.put('\x55');
  }
  FakeAgent agent;
  agent.spawn(2, {kTrainer, "--steps", "60"}, env);
  REQUIRE_MESSAGE(agent.wait_all_ok(120s), agent.log(0));
  std::string log = agent.log(0);
  CHECK(log.find("dtrain: checkpoint step-40 rejected: shard-tp0-pp0.bin: CRC mismatch") != std::string::npos);
  CHECK(log.find("resumed from checkpoint step-20") != std::string::npos);
  CHECK(final_line(log).checksum == straight.checksum);
  auto rejected = agent.received_of_type("ckpt.rejected");
  REQUIRE(rejected.size() == 1);  // rank 0 reports it once for the whole job
  CHECK(rejected[0].msg["step"] == 40);
  CHECK(rejected[0].msg["reason"].get<std::string>().find("CRC mismatch") != std::string::npos);
}

TEST_CASE("trainer: hello, rate-limited beats, the final beat, ckpt.committed and bye reach the agent") {
  TempDir dirs;
  FakeAgent agent;
  agent.spawn(2, {kTrainer, "--steps", "300"},
              {{"DTRAIN_CKPT_INTERVAL", "100"}, {"DTRAIN_CKPT_DIR", dirs.path()}, {"DTRAIN_HEARTBEAT_INTERVAL_MS", "60000"}});
  REQUIRE_MESSAGE(agent.wait_all_ok(120s), agent.log(0) << agent.log(1));
  auto hellos = agent.received_of_type("hello");
  REQUIRE(hellos.size() == 2);
  CHECK(hellos[0].msg["gen"] == 1);
  CHECK(hellos[0].msg["pid"].get<int>() > 0);
  auto beats = agent.received_of_type("beat");
  int rank0_beats = 0;
  int64_t last_step = 0;
  std::vector<std::string> phases;
  for (const auto& beat : beats) {
    if (beat.rank != 0) continue;
    if (beat.msg.contains("phase")) {  // around each synchronous save, at once (not rate-limited)
      phases.push_back(beat.msg.value("phase", ""));
      continue;
    }
    ++rank0_beats;
    last_step = beat.msg.value("step", int64_t{0});
    CHECK(beat.msg.contains("loss"));
    CHECK(beat.msg.value("samples", 0) == 64);
  }
  CHECK(rank0_beats == 2);  // first and final: the interval is a minute
  CHECK(last_step == 300);
  CHECK(phases == std::vector<std::string>{"checkpoint", "train", "checkpoint", "train", "checkpoint", "train"});
  auto committed = agent.received_of_type("ckpt.committed");
  REQUIRE(committed.size() == 3);
  CHECK(committed[0].rank == 0);
  CHECK(committed[0].msg["step"] == 100);
  CHECK(committed[2].msg["step"] == 300);
  CHECK(committed[0].msg["bytes"].get<int64_t>() > 50'000);
  auto byes = agent.received_of_type("bye");
  REQUIRE(byes.size() == 2);
  CHECK(byes[0].msg["reason"] == "finished");
}

TEST_CASE("trainer: a commit from a stale generation is refused: no manifest, the worker stops and says why") {
  TempDir dirs;
  FakeAgent agent(4);
  agent.set_hook([](dtrain::testing::JsonStore& store, int, const nlohmann::json& request) {
    if (request.value("type", "") == "gen.check") (void)store.begin_generation(5, dtrain::testing::steady_ms());
  });
  agent.spawn(1, {kTrainer, "--steps", "40"}, {{"DTRAIN_CKPT_INTERVAL", "10"}, {"DTRAIN_CKPT_DIR", dirs.path()}});
  auto status = agent.wait_exit(0, 60s);
  REQUIRE(status.has_value());
  CHECK(WIFEXITED(*status));
  CHECK(WEXITSTATUS(*status) == 1);
  std::string log = agent.log(0);
  CHECK(log.find("checkpoint step-10 not committed: generation 4 is no longer current") != std::string::npos);
  CHECK(std::filesystem::exists(dirs.path() + "/step-10/shard-tp0-pp0.bin"));
  CHECK_FALSE(std::filesystem::exists(dirs.path() + "/step-10/MANIFEST.json"));
  CHECK(agent.received_of_type("ckpt.committed").empty());
}

TEST_CASE("trainer: outside dtrain it refuses with the fix and --standalone trains alone") {
  TempDir dirs;
  std::string out = dirs.path() + "/out.txt";
  // Quoted: the checkout's path may hold spaces.
  const std::string trainer = dtrain::shell_quote(kTrainer), to_out = " > " + dtrain::shell_quote(out) + " 2>&1";
  int rc = std::system(("env -i " + trainer + " --steps 3" + to_out).c_str());
  CHECK(WEXITSTATUS(rc) == 2);
  CHECK(dtrain::testing::read_text(out).find("not running under dtrain") != std::string::npos);
  CHECK(dtrain::testing::read_text(out).find("--standalone") != std::string::npos);
  rc = std::system(("env -i " + trainer + " --steps 3 --standalone" + to_out).c_str());
  CHECK(WEXITSTATUS(rc) == 0);
  CHECK(dtrain::testing::read_text(out).find("final step=3") != std::string::npos);
}

TEST_CASE("trainer: the NCCL back end matches Gloo's loss (skips without a GPU)") {
  std::vector<std::string> flags{"--steps", "40"};
  bool ok = false;
  std::string log, log1;
  {
    FakeAgent agent;  // gone (ranks reaped, directory removed) before a skip exits the process
    std::vector<std::string> argv{kTrainer, "--steps", "40"};
    agent.spawn(2, argv, {{"DTRAIN_BACKEND", "nccl"}});
    ok = agent.wait_all_ok(120s);
    log = agent.log(0);
    log1 = agent.log(1);
  }
  for (const char* no_gpu : {"no CUDA device is usable", "this build has no CUDA/NCCL"}) {
    size_t at = log.find(no_gpu);
    if (ok || at == std::string::npos) continue;
    size_t begin = log.rfind('\n', at);
    begin = begin == std::string::npos ? 0 : begin + 1;
    dtrain::testing::skip_test("this test needs a CUDA GPU; dtrain-train said: " +
                               log.substr(begin, log.find('\n', at) - begin));
  }
  REQUIRE_MESSAGE(ok, log << log1);
  CHECK(log.find("backend nccl") != std::string::npos);
  Final gloo = final_line(train(2, flags));
  CHECK(std::abs(final_line(log).loss - gloo.loss) / gloo.loss <= 1e-4);
}
