#pragma once
// One training step of one rank: the micro-batches of its data-parallel share run through the
// pipeline stages with the 1F1B schedule (Megatron's non-interleaved one: p - s - 1 warm-up
// forwards on stage s, then one forward and one backward in turn, then the remaining
// backwards), activations sent to the next stage and gradients back, each exchange posted in
// both directions at once. Gradients of all micro-batches accumulate into one buffer (gradient
// accumulation); the loss rides back with the gradients, so every stage knows it.

#include <cstdint>
#include <vector>

#include "worker/runtime/worker.h"
#include "worker/trainer/data.h"
#include "worker/trainer/layout.h"
#include "worker/trainer/model.h"
#include "worker/trainer/staging.h"

namespace dtrain::trainer {

/// Where one step's time went on this rank (milliseconds).
struct StepTimes {
  double pipeline_wait_ms = 0;  ///< blocked in send/recv with a neighbour stage: the bubble
  double tensor_ms = 0;         ///< in the tensor-parallel allreduces
  double data_ms = 0;           ///< generating input samples
};

class PipelineStep {
 public:
  /// `micro_batches` micro-batches of `micro` samples per step, through `shard` (this rank's
  /// stage). `pipeline` and `tensor` stage this rank's pipeline and tensor-parallel groups.
  PipelineStep(MlpShard& shard, const ModelLayout& layout, const worker::Topology& topology, Staging& pipeline,
               Staging& tensor, const SyntheticData& data, int micro, int micro_batches, worker::Millis timeout);

  /// Largest message between stages, in doubles (to size the pipeline's staging buffer).
  static size_t max_message(const ModelLayout& layout, int micro);

  /// Forward and backward of the step's micro-batches, the first at sample `first_sample`:
  /// adds dLoss/dParams into grad[0..n) and the loss sum into grad[n], n = parameter_count().
  worker::Status run(uint64_t first_sample, double* grad, StepTimes& times);

 private:
  void load_samples(int mb, uint64_t first_sample, StepTimes& times);
  worker::Status forward(int mb, StepTimes& times);
  worker::Status backward(int mb, double* grad, StepTimes& times);
  TensorSum tensor_sum(StepTimes& times);
  /// Sends `send` to stage `send_to` while receiving `recv` from stage `recv_from` (null: that
  /// half is skipped), timed as pipeline wait.
  worker::Status exchange(std::vector<double>* send, int send_to, std::vector<double>* recv, int recv_from,
                          StepTimes& times);

  MlpShard& shard_;
  const SyntheticData& data_;
  Staging& pipeline_;
  Staging& tensor_;
  int stage_, stages_;
  int micro_, micro_batches_;
  int width_in_, width_out_, classes_;
  worker::Millis timeout_;
  // Per micro-batch: activations in (samples × width_in, then the labels) and out, gradients
  // of the outputs (samples × width_out, then the micro-batch's loss sum) and of the inputs.
  std::vector<std::vector<double>> activations_in_, activations_out_, output_grads_, input_grads_;
  std::vector<double> losses_;
  std::vector<int> labels_;
  std::vector<double> sample_;
};

}  // namespace dtrain::trainer
