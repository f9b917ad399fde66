#pragma once
// What a checkpoint of dtrain-train holds: model shape (checked on resume), step, data position,
// parameters and optimizer state, as one binary payload for the runtime's shard.

#include <cstdint>
#include <string>
#include <vector>

#include "worker/runtime/worker.h"

namespace dtrain::trainer {

struct TrainState {
  std::vector<int> widths;
  int64_t step = 0;
  int64_t samples_seen = 0;     ///< data position: the next sample index
  std::vector<float> params;
  std::vector<float> velocity;
};

std::string encode_state(const TrainState& state);
/// Decodes and checks the shape against `widths` (a resume with other --hidden etc. is an error).
worker::Result<TrainState> decode_state(const std::string& payload, const std::vector<int>& widths);

}  // namespace dtrain::trainer
