// dtrain plan --advise's arithmetic (launcher/plan/advice.h), held to hand-computed figures:
// model state per parameter, memory per GPU of each layout, the layout chosen in the founding
// document's order, the pipeline bubble, ring all-reduce traffic and Young/Daly.

#include <doctest/doctest.h>

#include <cmath>

#include "launcher/plan/advice.h"

using namespace dtrain;
using plan::Advice;
using plan::AdviceInputs;

namespace {

AdviceInputs inputs_for(double parameters, spec::IntentSettings::Optimizer optimizer = spec::IntentSettings::Optimizer::adamw) {
  AdviceInputs inputs;
  inputs.spec.intent.given = true;
  inputs.spec.intent.parameters = parameters;
  inputs.spec.intent.optimizer = optimizer;
  inputs.hardware = {.hosts = 2, .gpus_per_host = 8, .gpu_memory_bytes = 80e9};  // 64 GB usable
  return inputs;
}

const plan::LayoutCandidate& chosen(const Advice& advice) {
  REQUIRE(advice.recommended);
  return advice.candidates[*advice.recommended];
}

}  // namespace

TEST_CASE("model state: 7B in bf16 with AdamW is 112 GB (2 + 2 + 4 master + 8 moments a parameter)") {
  spec::IntentSettings intent;
  intent.parameters = 7e9;
  std::optional<plan::ModelState> state = plan::model_state(intent);
  REQUIRE(state);
  CHECK(state->weights == doctest::Approx(14e9));
  CHECK(state->gradients == doctest::Approx(14e9));
  CHECK(state->optimizer == doctest::Approx(84e9));
  CHECK(state->total() == doctest::Approx(112e9));
  intent.precision = spec::IntentSettings::Precision::fp32;
  intent.optimizer = spec::IntentSettings::Optimizer::sgd;
  CHECK(plan::model_state(intent)->total() == doctest::Approx(56e9));  // 4 + 4, no master copy
  intent.optimizer = spec::IntentSettings::Optimizer::none;
  CHECK(plan::model_state(intent)->total() == doctest::Approx(28e9));  // weights only
  intent = {};
  intent.state_bytes = 160'000'000'000;  // the user's total, split 2:2:12
  CHECK(plan::model_state(intent)->optimizer == doctest::Approx(120e9));
  CHECK_FALSE(plan::model_state(spec::IntentSettings{}));
}

TEST_CASE("advice: a 100M model is data parallel") {
  Advice advice = plan::advise(inputs_for(1e8));
  CHECK(*advice.recommended == 0);
  CHECK(chosen(advice).name == "data parallel");
  CHECK(chosen(advice).bytes_per_gpu == doctest::Approx(1.6e9));
  CHECK(chosen(advice).data == 16);
  // Ring all-reduce: 2 (n - 1) / n of the 0.2 GB of gradients.
  CHECK(advice.gradient_bytes_per_step == doctest::Approx(0.2e9 * 2 * 15 / 16));
}

TEST_CASE("advice: 7B with AdamW does not fit data parallel on 80 GB, and shards its optimizer state") {
  Advice advice = plan::advise(inputs_for(7e9));
  CHECK_FALSE(advice.candidates[0].fits);  // 112 GB > 64 GB
  CHECK(chosen(advice).name == "data parallel, optimizer state sharded");
  CHECK(chosen(advice).bytes_per_gpu == doctest::Approx(28e9 + 84e9 / 16));
}

TEST_CASE("advice: 70B with SGD on 2 x 8 GPUs needs TP x PP, with the memory per GPU shown") {
  Advice advice = plan::advise(inputs_for(70e9, spec::IntentSettings::Optimizer::sgd));  // 560 GB of state
  const plan::LayoutCandidate& layout = chosen(advice);
  CHECK(layout.tensor > 1);
  CHECK(layout.pipeline > 1);
  CHECK(layout.name == "TP 4 x PP 2, optimizer state sharded");
  CHECK(layout.bytes_per_gpu == doctest::Approx(280e9 / 8 + 280e9 / 8 / 2));  // 52.5 GB
  for (size_t i = 0; i < *advice.recommended; ++i) CHECK_FALSE(advice.candidates[i].fits);
}

TEST_CASE("advice: a model that fits nowhere gets no layout, and the checkpoint advice still comes") {
  Advice advice = plan::advise(inputs_for(1e12));
  CHECK_FALSE(advice.recommended);
  REQUIRE(advice.checkpoint);
  // Defaults: a 60 s save, one failure per host per 30 days over 2 hosts (15 days).
  CHECK(advice.checkpoint->interval_seconds == doctest::Approx(std::sqrt(2.0 * 60 * 15 * 86400)));
  CHECK(advice.checkpoint->mtbf_source.find("default") != std::string::npos);
}

TEST_CASE("pipeline bubble and Young/Daly, by hand") {
  CHECK(plan::pipeline_bubble(4, 4) == doctest::Approx(3.0 / 7));  // idles 43 %
  CHECK(plan::pipeline_bubble(1, 4) == 0);
  CHECK(plan::young_daly_interval(30, 86400) == doctest::Approx(std::sqrt(2.0 * 30 * 86400)));
  AdviceInputs inputs = inputs_for(70e9, spec::IntentSettings::Optimizer::sgd);
  inputs.spec.batch = {.global = 64, .micro = 4};  // dp 2 → 8 micro-batches per replica
  inputs.checkpoint_cost_seconds = 30;
  inputs.checkpoint_cost_source = "--checkpoint-cost";
  inputs.mtbf_seconds = 86400;
  inputs.mtbf_source = "--mtbf";
  inputs.step_seconds = 2;
  Advice advice = plan::advise(inputs);
  REQUIRE(advice.bubble);
  CHECK(*advice.bubble == doctest::Approx(1.0 / 9));  // p 2, m 8
  CHECK(advice.checkpoint->interval_steps == doctest::Approx(std::sqrt(2.0 * 30 * 86400) / 2));
}
