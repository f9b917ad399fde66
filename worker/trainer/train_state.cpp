#include "worker/trainer/train_state.h"

#include <cstring>

namespace dtrain::trainer {
namespace {

constexpr char kMagic[8] = {'D', 'T', 'R', 'N', 'M', 'L', 'P', '2'};
// The format before hybrid parallelism: no layout, the whole model in one shard.
constexpr char kMagicUnsharded[8] = {'D', 'T', 'R', 'N', 'M', 'L', 'P', '1'};

template <class T>
void append(std::string& out, const T& value) {
  out.append(reinterpret_cast<const char*>(&value), sizeof(T));
}

std::string shape_text(const std::vector<int>& widths) {
  std::string text;
  for (int width : widths) text += (text.empty() ? "" : "-") + std::to_string(width);
  return text;
}

}  // namespace

std::string encode_state(const TrainState& state) {
  std::string out;
  // One allocation of the final size: appending grew the buffer by copies (each of the whole
  // state so far), which was most of a save's stall of the training loop.
  out.reserve(sizeof(kMagic) + 64 + 4 * state.widths.size() +
              (state.params.size() + state.velocity.size()) * sizeof(float));
  out.append(kMagic, sizeof(kMagic));
  append<uint32_t>(out, static_cast<uint32_t>(state.widths.size()));
  for (int width : state.widths) append<int32_t>(out, width);
  for (int value : {state.tensor, state.pipeline, state.tp_rank, state.pp_rank}) append<int32_t>(out, value);
  append(out, state.step);
  append(out, state.samples_seen);
  append<uint64_t>(out, state.params.size());
  out.append(reinterpret_cast<const char*>(state.params.data()), state.params.size() * sizeof(float));
  out.append(reinterpret_cast<const char*>(state.velocity.data()), state.velocity.size() * sizeof(float));
  return out;
}

worker::Result<TrainState> decode_state(const std::string& payload, const std::vector<int>& widths) {
  size_t at = 0;
  auto take = [&](void* out, size_t size) {
    if (at + size > payload.size()) return false;
    std::memcpy(out, payload.data() + at, size);
    at += size;
    return true;
  };
  char magic[8];
  uint32_t layers = 0;
  bool read = take(magic, sizeof(magic));
  bool sharded = read && std::memcmp(magic, kMagic, sizeof(kMagic)) == 0;
  bool unsharded = read && std::memcmp(magic, kMagicUnsharded, sizeof(kMagicUnsharded)) == 0;
  if (!(sharded || unsharded) || !take(&layers, 4) || layers > 1000) {
    return worker::Error{"checkpoint payload is not a dtrain-train state"};
  }
  TrainState state;
  for (uint32_t i = 0; i < layers; ++i) {
    int32_t width = 0;
    if (!take(&width, 4)) return worker::Error{"checkpoint payload is truncated"};
    state.widths.push_back(width);
  }
  if (sharded) {
    for (int* value : {&state.tensor, &state.pipeline, &state.tp_rank, &state.pp_rank}) {
      int32_t stored = 0;
      if (!take(&stored, 4)) return worker::Error{"checkpoint payload is truncated"};
      *value = stored;
    }
  }
  if (state.widths != widths) {
    return worker::Error{"checkpoint holds a model of shape " + shape_text(state.widths) + " but the flags ask for " +
                         shape_text(widths) + "; use the same --inputs/--hidden/--layers/--classes or another checkpoint dir"};
  }
  uint64_t count = 0;
  if (!take(&state.step, 8) || !take(&state.samples_seen, 8) || !take(&count, 8) ||
      payload.size() - at != count * 2 * sizeof(float)) {
    return worker::Error{"checkpoint payload is truncated or has the wrong size"};
  }
  state.params.resize(count);
  state.velocity.resize(count);
  (void)take(state.params.data(), count * sizeof(float));
  (void)take(state.velocity.data(), count * sizeof(float));
  return state;
}

std::optional<worker::Error> layout_refusal(const TrainState& saved, int tensor, int pipeline, int64_t step,
                                            const std::string& dir) {
  if (saved.tensor == tensor && saved.pipeline == pipeline) return std::nullopt;
  auto layout = [](int t, int p) { return "tensor " + std::to_string(t) + " x pipeline " + std::to_string(p); };
  return worker::Error{"checkpoint step-" + std::to_string(step) + " in '" + dir + "' was written by a job of " +
                       layout(saved.tensor, saved.pipeline) + ", but this job runs " + layout(tensor, pipeline) +
                       "; dtrain-train cannot reshard across tensor or pipeline parallelism (only the data size "
                       "may change): resume with parallelism.tensor: " + std::to_string(saved.tensor) +
                       " and parallelism.pipeline: " + std::to_string(saved.pipeline) +
                       ", or use another checkpoint dir"};
}

}  // namespace dtrain::trainer
