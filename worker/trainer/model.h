#pragma once
// The student: an MLP classifier (ReLU hidden layers, softmax cross-entropy), held as the shard
// that one rank owns: the layers of its pipeline stage, each split for its tensor-parallel rank
// as the layout says (worker/trainer/layout.h). Parameters are float32 in one flat vector (so
// they allreduce, checkpoint and checksum as one buffer); gradients accumulate in float64, sample
// by sample in sample order, so that every layout agrees with one rank up to summation order.

#include <cstdint>
#include <functional>
#include <vector>

#include "worker/runtime/worker.h"
#include "worker/trainer/layout.h"

namespace dtrain::trainer {

/// Sums a buffer of doubles in place across the tensor-parallel group.
using TensorSum = std::function<worker::Status(double* data, size_t count)>;

class MlpShard {
 public:
  /// Stage `stage`'s layers as tensor-parallel rank `tp_rank` holds them, initialised as the
  /// full model would be (He-uniform from `seed`, keyed by the full index), so that every layout
  /// starts from the same parameters.
  MlpShard(const ModelLayout& layout, int stage, int tp_rank, uint64_t seed);

  size_t parameter_count() const { return params_.size(); }
  std::vector<float>& params() { return params_; }
  const std::vector<float>& params() const { return params_; }
  int width_in() const { return local_.front().in_full; }    ///< activations entering the stage
  int width_out() const { return local_.back().out_full; }   ///< activations leaving it

  /// Forward of micro-batch `slot` (`batch` samples): `input` (batch × width_in) → `output`
  /// (batch × width_out). Keeps what backward(slot) needs.
  worker::Status forward(int slot, const double* input, int batch, double* output, const TensorSum& tensor_sum);

  /// Backward of micro-batch `slot`: `output_grad` (batch × width_out, through this stage's last
  /// ReLU already) adds dLoss/dParams into `grad` (parameter_count() doubles) and, unless null,
  /// writes dLoss/dInput through the ReLU that produced the input into `input_grad`.
  worker::Status backward(int slot, const double* output_grad, double* grad, double* input_grad,
                          const TensorSum& tensor_sum);

  /// FNV-1a 64 over the parameter bytes: equal checksums mean bit-identical parameters.
  uint64_t checksum() const;

 private:
  struct Layer {
    LinearLayer full;
    int in_full = 0, out_full = 0;   // widths of the activations around it (replicated)
    int in = 0, out = 0;             // this rank's slice of its weights
    size_t weight_at = 0, bias_at = 0;
  };
  std::vector<Layer> local_;
  std::vector<float> params_;
  int tp_rank_ = 0;
  // Per micro-batch: each local layer's input (this rank's slice), kept for backward.
  std::vector<std::vector<std::vector<double>>> saved_inputs_;
  std::vector<int> saved_batch_;
};

/// Softmax cross-entropy of `batch` rows of `classes` logits against `labels`: writes dLoss/dlogits
/// into `logits_grad` and returns the sum of the rows' losses.
double softmax_cross_entropy(const double* logits, const int* labels, int batch, int classes, double* logits_grad);

}  // namespace dtrain::trainer
