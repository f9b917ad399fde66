#include "worker/trainer/pipeline.h"

#include <algorithm>
#include <chrono>

namespace dtrain::trainer {
namespace {

using Clock = std::chrono::steady_clock;
constexpr int kNone = worker::Communicator::kNoPeer;

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

}  // namespace

PipelineStep::PipelineStep(MlpShard& shard, const ModelLayout& layout, const worker::Topology& topology,
                           Staging& pipeline, Staging& tensor, const SyntheticData& data, int micro,
                           int micro_batches, worker::Millis timeout)
    : shard_(shard),
      data_(data),
      pipeline_(pipeline),
      tensor_(tensor),
      stage_(topology.pp_rank),
      stages_(topology.pp_size),
      micro_(micro),
      micro_batches_(micro_batches),
      width_in_(layout.stage_width_in(topology.pp_rank)),
      width_out_(layout.stage_width_out(topology.pp_rank)),
      classes_(layout.widths.back()),
      timeout_(timeout) {
  auto sized = [&](size_t count) { return std::vector<std::vector<double>>(static_cast<size_t>(micro_batches), std::vector<double>(count)); };
  activations_in_ = sized(static_cast<size_t>(micro) * (width_in_ + 1));
  activations_out_ = sized(static_cast<size_t>(micro) * (width_out_ + 1));
  output_grads_ = sized(static_cast<size_t>(micro) * width_out_ + 1);
  input_grads_ = sized(static_cast<size_t>(micro) * width_in_ + 1);
  losses_.assign(static_cast<size_t>(micro_batches), 0.0);
  labels_.resize(static_cast<size_t>(micro));
  sample_.resize(static_cast<size_t>(layout.widths.front()));
}

size_t PipelineStep::max_message(const ModelLayout& layout, int micro) {
  size_t largest = 1;
  for (int stage = 0; stage + 1 < layout.pipeline; ++stage) {
    largest = std::max(largest, static_cast<size_t>(micro) * (layout.stage_width_out(stage) + 1) + 1);
  }
  return largest;
}

void PipelineStep::load_samples(int mb, uint64_t first_sample, StepTimes& times) {
  Clock::time_point started = Clock::now();
  std::vector<double>& in = activations_in_[static_cast<size_t>(mb)];
  uint64_t base = first_sample + static_cast<uint64_t>(mb) * micro_;
  for (int k = 0; k < micro_; ++k) {
    int label = data_.sample(base + static_cast<uint64_t>(k), &in[static_cast<size_t>(k) * width_in_]);
    in[static_cast<size_t>(micro_) * width_in_ + k] = label;  // labels travel with the activations
  }
  times.data_ms += ms_since(started);
}

TensorSum PipelineStep::tensor_sum(StepTimes& times) {
  return [this, &times](double* values, size_t count) {
    Clock::time_point started = Clock::now();
    worker::Status summed = tensor_.allreduce_sum(values, count, timeout_);
    times.tensor_ms += ms_since(started);
    return summed;
  };
}

worker::Status PipelineStep::forward(int mb, StepTimes& times) {
  std::vector<double>& in = activations_in_[static_cast<size_t>(mb)];
  std::vector<double>& out = activations_out_[static_cast<size_t>(mb)];
  if (auto done = shard_.forward(mb, in.data(), micro_, out.data(), tensor_sum(times)); !done) return done;
  size_t labels_at_in = static_cast<size_t>(micro_) * width_in_, labels_at_out = static_cast<size_t>(micro_) * width_out_;
  std::copy(in.begin() + static_cast<std::ptrdiff_t>(labels_at_in), in.end(),
            out.begin() + static_cast<std::ptrdiff_t>(labels_at_out));
  if (stage_ + 1 == stages_) {
    for (int k = 0; k < micro_; ++k) labels_[static_cast<size_t>(k)] = static_cast<int>(out[labels_at_out + k]);
    std::vector<double>& logits_grad = output_grads_[static_cast<size_t>(mb)];
    double loss = softmax_cross_entropy(out.data(), labels_.data(), micro_, classes_, logits_grad.data());
    logits_grad.back() = loss;
  }
  return {};
}

worker::Status PipelineStep::backward(int mb, double* grad, StepTimes& times) {
  std::vector<double>& output_grad = output_grads_[static_cast<size_t>(mb)];
  std::vector<double>& input_grad = input_grads_[static_cast<size_t>(mb)];
  double* wanted = stage_ == 0 ? nullptr : input_grad.data();
  if (auto done = shard_.backward(mb, output_grad.data(), grad, wanted, tensor_sum(times)); !done) return done;
  losses_[static_cast<size_t>(mb)] = output_grad.back();
  input_grad.back() = output_grad.back();
  return {};
}

worker::Status PipelineStep::exchange(std::vector<double>* send, int send_to, std::vector<double>* recv,
                                      int recv_from, StepTimes& times) {
  if (send == nullptr && recv == nullptr) return {};
  Clock::time_point started = Clock::now();
  worker::Status done = pipeline_.send_recv(send ? send->data() : nullptr, send ? send->size() : 0,
                                            send ? send_to : kNone, recv ? recv->data() : nullptr,
                                            recv ? recv->size() : 0, recv ? recv_from : kNone, timeout_);
  times.pipeline_wait_ms += ms_since(started);
  return done;
}

worker::Status PipelineStep::run(uint64_t first_sample, double* grad, StepTimes& times) {
  bool first = stage_ == 0, last = stage_ + 1 == stages_;
  int previous = stage_ - 1, next = stage_ + 1;
  auto at = [](std::vector<std::vector<double>>& buffers, int mb) { return &buffers[static_cast<size_t>(mb)]; };
  // The four moves of the schedule; at either end of the pipeline some are local or nothing.
  auto receive_forward = [&](int mb) -> worker::Status {
    if (first) {
      load_samples(mb, first_sample, times);
      return {};
    }
    return exchange(nullptr, kNone, at(activations_in_, mb), previous, times);
  };
  auto send_forward = [&](int mb) {
    return last ? worker::Status{} : exchange(at(activations_out_, mb), next, nullptr, kNone, times);
  };
  auto receive_backward = [&](int mb) {
    return last ? worker::Status{} : exchange(nullptr, kNone, at(output_grads_, mb), next, times);
  };
  auto send_backward = [&](int mb) {
    return first ? worker::Status{} : exchange(at(input_grads_, mb), previous, nullptr, kNone, times);
  };

  int warmup = std::min(stages_ - stage_ - 1, micro_batches_);
  int steady = micro_batches_ - warmup;
  int forwards = 0, backwards = 0;
  for (int i = 0; i < warmup; ++i, ++forwards) {
    if (auto done = receive_forward(forwards); !done) return done;
    if (auto done = forward(forwards, times); !done) return done;
    if (auto done = send_forward(forwards); !done) return done;
  }
  if (steady > 0) {
    if (auto done = receive_forward(forwards); !done) return done;
  }
  for (int i = 0; i < steady; ++i) {
    int mb = forwards++;
    if (auto done = forward(mb, times); !done) return done;
    // Send this micro-batch's activations on while receiving the oldest one's gradients.
    if (!last) {
      if (auto done = exchange(at(activations_out_, mb), next, at(output_grads_, backwards), next, times); !done) {
        return done;
      }
    }
    int back = backwards++;
    if (auto done = backward(back, grad, times); !done) return done;
    if (i + 1 == steady) {
      if (auto done = send_backward(back); !done) return done;
    } else if (first) {
      load_samples(forwards, first_sample, times);
    } else {
      if (auto done = exchange(at(input_grads_, back), previous, at(activations_in_, forwards), previous, times);
          !done) {
        return done;
      }
    }
  }
  for (int i = 0; i < warmup; ++i) {
    int back = backwards++;
    if (auto done = receive_backward(back); !done) return done;
    if (auto done = backward(back, grad, times); !done) return done;
    if (auto done = send_backward(back); !done) return done;
  }
  // Summed in micro-batch order on every stage, so that every rank reports the same loss.
  double& loss_sum = grad[shard_.parameter_count()];
  for (double loss : losses_) loss_sum += loss;
  return {};
}

}  // namespace dtrain::trainer
