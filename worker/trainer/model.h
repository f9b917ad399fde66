#pragma once
// The student: an MLP classifier (ReLU hidden layers, softmax cross-entropy). Parameters are
// float32 in one flat vector (so they allreduce, checkpoint and checksum as one buffer);
// gradients accumulate in float64 so that 1, 2 and 4 ranks agree up to summation order.

#include <cstdint>
#include <string>
#include <vector>

namespace dtrain::trainer {

class Mlp {
 public:
  /// inputs → `layers` hidden layers of `hidden` units → classes; He-uniform from `seed`.
  Mlp(int inputs, int hidden, int layers, int classes, uint64_t seed);

  size_t parameter_count() const { return params_.size(); }
  std::vector<float>& params() { return params_; }
  const std::vector<float>& params() const { return params_; }
  const std::vector<int>& widths() const { return widths_; }

  /// Forward and backward for one sample: adds dLoss/dParams into `grad` (parameter_count()
  /// doubles) and returns the sample's loss.
  double accumulate(const double* x, int label, double* grad);

  /// FNV-1a 64 over the parameter bytes: equal checksums mean bit-identical parameters.
  uint64_t checksum() const;

 private:
  std::vector<int> widths_;          // {inputs, hidden..., classes}
  std::vector<size_t> weight_at_;    // offset of layer l's weights (out x in, row-major)
  std::vector<size_t> bias_at_;
  std::vector<float> params_;
  // Scratch reused across samples: activations and their gradients per layer.
  std::vector<std::vector<double>> activations_;
  std::vector<std::vector<double>> deltas_;
};

}  // namespace dtrain::trainer
