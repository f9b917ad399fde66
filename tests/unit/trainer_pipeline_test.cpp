// The trainer's layout (which layers split how, which stage runs which) and one step of its
// 1F1B pipeline schedule, with the ranks as threads of this process over real Gloo groups
// (Worker::in_process + InProcessKv). The schedule must finish for any micro-batch count,
// fewer than the stages included, and pipeline parallelism alone must not change one bit of
// the gradients: each stage's are the one-rank gradients of its layers.
#include <doctest/doctest.h>

#include <chrono>
#include <cmath>
#include <thread>

#include "worker/runtime/worker.h"
#include "worker/trainer/data.h"
#include "worker/trainer/layout.h"
#include "worker/trainer/model.h"
#include "worker/trainer/pipeline.h"
#include "worker/trainer/staging.h"

using namespace dtrain::trainer;
using namespace std::chrono_literals;
namespace worker = dtrain::worker;

TEST_CASE("layout: pairs split column then row, an odd classifier is replicated, stages take whole pairs") {
  auto layout = plan_model({32, 64, 64, 64, 10}, 2, 2);  // 4 linear layers: two pairs
  REQUIRE(layout.ok());
  CHECK(layout->layers[0].split == Split::kColumn);
  CHECK(layout->layers[1].split == Split::kRow);
  CHECK(layout->layers[2].split == Split::kColumn);
  CHECK(layout->layers[3].split == Split::kRow);
  CHECK_FALSE(layout->layers[3].relu);
  CHECK(layout->stage_begin == std::vector<int>{0, 2, 4});
  CHECK(layout->describe() == "stage 0: layers 0-1, stage 1: layers 2-3");

  auto odd = plan_model({32, 64, 64, 10}, 1, 2);  // 3 layers: a pair and the classifier
  REQUIRE(odd.ok());
  CHECK(odd->layers[2].split == Split::kReplicated);
  CHECK(odd->stage_begin == std::vector<int>{0, 2, 3});
  CHECK(odd->stage_width_out(0) == 64);
  CHECK(odd->stage_width_in(1) == 64);

  auto seven = plan_model({8, 16, 16, 16, 16, 16, 16, 4}, 1, 3);  // 4 units over 3 stages
  REQUIRE(seven.ok());
  CHECK(seven->stage_begin == std::vector<int>{0, 2, 4, 7});
}

TEST_CASE("layout: what does not split says which flag fixes it") {
  auto indivisible = plan_model({32, 64, 64, 10}, 3, 1);
  REQUIRE_FALSE(indivisible.ok());
  CHECK(indivisible.error().message ==
        "dtrain-train: tensor parallelism 3 must divide --hidden 64; choose --hidden as a multiple of 3");
  auto too_deep = plan_model({32, 64, 64, 10}, 1, 3);
  REQUIRE_FALSE(too_deep.ok());
  CHECK(too_deep.error().message.find("pipeline parallelism 3 needs 3 stages, but --layers 2 makes 2") != std::string::npos);
  CHECK(too_deep.error().message.find("use --layers 5 or more") != std::string::npos);
  auto nothing_to_split = plan_model({32, 10}, 2, 1);
  REQUIRE_FALSE(nothing_to_split.ok());
  CHECK(nothing_to_split.error().message.find("use --layers 1 or more") != std::string::npos);
}

namespace {

struct RankStep {
  std::vector<double> grad;  ///< this rank's shard, then the loss sum
  std::string error;
};

/// One training step of `micro_batches` micro-batches of 3 samples on tensor × pipeline ranks,
/// each a thread with its own in-process Worker; every rank's gradient buffer, by rank.
std::vector<RankStep> one_step(const std::vector<int>& widths, int tensor, int pipeline, int micro_batches) {
  constexpr int kMicro = 3;
  auto kv = std::make_shared<worker::InProcessKv>();
  int world = tensor * pipeline;
  std::vector<RankStep> results(static_cast<size_t>(world));
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < world; ++rank) {
    ranks.emplace_back([&, rank] {
      RankStep& result = results[static_cast<size_t>(rank)];
      worker::Topology topology;
      topology.rank = rank;
      topology.world_size = world;
      topology.tp_size = tensor;
      topology.pp_size = pipeline;
      topology.tp_rank = rank % tensor;
      topology.pp_rank = rank / tensor;
      worker::Settings settings;
      settings.backend = "gloo";
      auto me = worker::Worker::in_process(topology, settings, kv);
      auto groups = me->connect_groups(20s);
      if (!groups) {
        result.error = groups.error().message;
        return;
      }
      auto layout = plan_model(widths, tensor, pipeline);
      MlpShard shard(*layout, topology.pp_rank, topology.tp_rank, 7);
      SyntheticData data(widths.front(), widths.back(), 99);
      auto pipe = Staging::create(*groups->pipeline, PipelineStep::max_message(*layout, kMicro) * sizeof(double));
      auto split = Staging::create(*groups->tensor, kMicro * 64 * sizeof(double));
      PipelineStep step(shard, *layout, topology, **pipe, **split, data, kMicro, micro_batches, 20s);
      result.grad.assign(shard.parameter_count() + 1, 0.0);
      StepTimes times;
      if (auto ran = step.run(0, result.grad.data(), times); !ran) result.error = ran.error().message;
    });
  }
  for (std::thread& rank : ranks) rank.join();
  return results;
}

}  // namespace

TEST_CASE("pipeline: 1F1B over 2 and 3 stages, with fewer, as many and more micro-batches, gives one rank's gradients bit for bit") {
  std::vector<int> widths{8, 16, 16, 16, 16, 16, 4};  // 6 layers: 3 pairs
  for (int micro_batches : {1, 2, 5}) {
    CAPTURE(micro_batches);
    std::vector<RankStep> alone = one_step(widths, 1, 1, micro_batches);
    REQUIRE_MESSAGE(alone[0].error.empty(), alone[0].error);
    double loss = alone[0].grad.back();
    CHECK(loss > 0);
    for (int stages : {2, 3}) {
      CAPTURE(stages);
      std::vector<RankStep> staged = one_step(widths, 1, stages, micro_batches);
      std::vector<double> joined;
      for (const RankStep& stage : staged) {
        REQUIRE_MESSAGE(stage.error.empty(), stage.error);
        CHECK(stage.grad.back() == loss);  // the loss rides back to every stage
        joined.insert(joined.end(), stage.grad.begin(), stage.grad.end() - 1);
      }
      joined.push_back(loss);
      CHECK(joined == alone[0].grad);
    }
  }
}

TEST_CASE("pipeline: tensor 2 x pipeline 3 agrees with one rank up to summation order") {
  std::vector<int> widths{8, 16, 16, 16, 16, 16, 4};
  std::vector<RankStep> alone = one_step(widths, 1, 1, 4);
  std::vector<RankStep> hybrid = one_step(widths, 2, 3, 4);
  for (const RankStep& rank : hybrid) {
    REQUIRE_MESSAGE(rank.error.empty(), rank.error);
    CHECK(std::abs(rank.grad.back() - alone[0].grad.back()) <= 1e-12 * alone[0].grad.back());
  }
}
