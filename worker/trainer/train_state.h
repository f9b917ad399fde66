#pragma once
// What a checkpoint shard of dtrain-train holds: model shape (checked on resume), the
// tensor × pipeline layout that wrote it and which shard this is, step, data position, and
// this shard's parameters and optimizer state, as one binary payload for the runtime's shard.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "worker/runtime/worker.h"

namespace dtrain::trainer {

struct TrainState {
  std::vector<int> widths;
  int tensor = 1;               ///< layout of the job that wrote it
  int pipeline = 1;
  int tp_rank = 0;              ///< this shard's position
  int pp_rank = 0;
  int64_t step = 0;
  int64_t samples_seen = 0;     ///< data position: the next sample index
  std::vector<float> params;
  std::vector<float> velocity;
};

std::string encode_state(const TrainState& state);
/// Decodes and checks the shape against `widths` (a resume with other --hidden etc. is an error).
/// A payload of the first format (before hybrid parallelism) reads as tensor 1 × pipeline 1.
worker::Result<TrainState> decode_state(const std::string& payload, const std::vector<int>& widths);

/// The refusal to resume checkpoint step `step` of `dir`, written by `saved`'s layout, in a
/// job of `tensor` × `pipeline`; nullopt when the layouts agree (the data size may differ).
std::optional<worker::Error> layout_refusal(const TrainState& saved, int tensor, int pipeline, int64_t step,
                                            const std::string& dir);

}  // namespace dtrain::trainer
