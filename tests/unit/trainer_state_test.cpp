// A dtrain-train checkpoint shard: what it records round-trips, the format before hybrid
// parallelism still reads (as tensor 1 x pipeline 1), and a resume at another tensor or
// pipeline size is refused with the fix, while another data size is not.
#include <doctest/doctest.h>

#include <cstring>

#include "worker/trainer/train_state.h"

using namespace dtrain::trainer;

namespace {

TrainState sample_state() {
  TrainState state;
  state.widths = {4, 8, 3};
  state.tensor = 2;
  state.pipeline = 2;
  state.tp_rank = 1;
  state.pp_rank = 0;
  state.step = 40;
  state.samples_seen = 2560;
  state.params = {1.5f, -2.0f, 0.25f};
  state.velocity = {0.0f, 0.125f, -1.0f};
  return state;
}

}  // namespace

TEST_CASE("train state: a shard's layout, position and tensors round-trip") {
  TrainState state = sample_state();
  auto decoded = decode_state(encode_state(state), {4, 8, 3});
  REQUIRE_MESSAGE(decoded.ok(), decoded.error().message);
  CHECK(decoded->tensor == 2);
  CHECK(decoded->pipeline == 2);
  CHECK(decoded->tp_rank == 1);
  CHECK(decoded->pp_rank == 0);
  CHECK(decoded->step == 40);
  CHECK(decoded->samples_seen == 2560);
  CHECK(decoded->params == state.params);
  CHECK(decoded->velocity == state.velocity);
  auto other_shape = decode_state(encode_state(state), {4, 16, 3});
  REQUIRE_FALSE(other_shape.ok());
  CHECK(other_shape.error().message.find("shape 4-8-3 but the flags ask for 4-16-3") != std::string::npos);
}

TEST_CASE("train state: a payload of the unsharded format reads as tensor 1 x pipeline 1") {
  TrainState state = sample_state();
  std::string payload = encode_state(state);
  // The first format: magic ...MLP1 and no layout fields between the widths and the step.
  payload[7] = '1';
  size_t layout_at = 8 + 4 + 3 * 4;
  payload.erase(layout_at, 4 * 4);
  auto decoded = decode_state(payload, {4, 8, 3});
  REQUIRE_MESSAGE(decoded.ok(), decoded.error().message);
  CHECK(decoded->tensor == 1);
  CHECK(decoded->pipeline == 1);
  CHECK(decoded->step == 40);
  CHECK(decoded->params == state.params);
}

TEST_CASE("train state: another tensor or pipeline size is refused with the fix, another data size is not") {
  TrainState state = sample_state();
  CHECK_FALSE(layout_refusal(state, 2, 2, 40, "/ckpt").has_value());
  auto refusal = layout_refusal(state, 1, 2, 40, "/ckpt");
  REQUIRE(refusal.has_value());
  CHECK(refusal->message ==
        "checkpoint step-40 in '/ckpt' was written by a job of tensor 2 x pipeline 2, but this job runs tensor 1 x "
        "pipeline 2; dtrain-train cannot reshard across tensor or pipeline parallelism (only the data size may "
        "change): resume with parallelism.tensor: 2 and parallelism.pipeline: 2, or use another checkpoint dir");
  CHECK(layout_refusal(state, 2, 4, 40, "/ckpt").has_value());
}
