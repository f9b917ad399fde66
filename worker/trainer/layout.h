#pragma once
// How the MLP is cut for hybrid parallelism. Linear layers go in pairs, Megatron-style: the
// first of a pair is column-parallel (each tensor-parallel rank owns a slice of its outputs),
// the second row-parallel (each owns the matching slice of its inputs, and one allreduce sums
// the partial outputs). An odd last layer (the classifier) is replicated. Pipeline stages take
// whole pairs, contiguous and as even as the count allows, so a stage boundary always carries
// full (replicated) activations.

#include <string>
#include <vector>

#include "worker/runtime/worker.h"

namespace dtrain::trainer {

enum class Split {
  kColumn,      ///< weights split by output rows; the input is replicated, the output sliced
  kRow,         ///< weights split by input columns; partial outputs are summed over the group
  kReplicated,  ///< every tensor-parallel rank holds and computes the whole layer
};

struct LinearLayer {
  int index = 0;   ///< position in the full model
  int in = 0;      ///< full widths
  int out = 0;
  Split split = Split::kReplicated;
  bool relu = true;  ///< a ReLU follows (all but the last layer)
};

struct ModelLayout {
  std::vector<int> widths;                 ///< {inputs, hidden..., classes}
  int tensor = 1;
  int pipeline = 1;
  std::vector<LinearLayer> layers;         ///< the full model, in order
  std::vector<int> stage_begin;            ///< layers [stage_begin[s], stage_begin[s + 1]) run on stage s
  int stage_width_in(int stage) const { return layers.at(static_cast<size_t>(stage_begin.at(stage))).in; }
  int stage_width_out(int stage) const {
    return layers.at(static_cast<size_t>(stage_begin.at(stage + 1) - 1)).out;
  }
  std::string describe() const;  ///< "stage 0: layers 0-1 (column+row), stage 1: layer 2"
};

/// Cuts the model `widths` for `tensor` × `pipeline`. Errors name the flag that fixes them.
worker::Result<ModelLayout> plan_model(const std::vector<int>& widths, int tensor, int pipeline);

}  // namespace dtrain::trainer
