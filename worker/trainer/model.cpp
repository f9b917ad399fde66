#include "worker/trainer/model.h"

#include <algorithm>
#include <cmath>

#include "worker/trainer/data.h"

namespace dtrain::trainer {

MlpShard::MlpShard(const ModelLayout& layout, int stage, int tp_rank, uint64_t seed) : tp_rank_(tp_rank) {
  size_t offset = 0;
  for (int l = layout.stage_begin.at(stage); l < layout.stage_begin.at(stage + 1); ++l) {
    Layer layer;
    layer.full = layout.layers.at(static_cast<size_t>(l));
    layer.in_full = layer.full.in;
    layer.out_full = layer.full.out;
    layer.in = layer.full.split == Split::kRow ? layer.full.in / layout.tensor : layer.full.in;
    layer.out = layer.full.split == Split::kColumn ? layer.full.out / layout.tensor : layer.full.out;
    layer.weight_at = offset;
    offset += static_cast<size_t>(layer.in) * layer.out;
    layer.bias_at = offset;
    offset += static_cast<size_t>(layer.out);  // biases start at zero
    local_.push_back(layer);
  }
  params_.assign(offset, 0.0f);
  for (const Layer& layer : local_) {
    int row_base = layer.full.split == Split::kColumn ? tp_rank * layer.out : 0;
    int column_base = layer.full.split == Split::kRow ? tp_rank * layer.in : 0;
    double bound = std::sqrt(6.0 / layer.full.in);
    uint64_t stream = hash64(seed * 1000003 + static_cast<uint64_t>(layer.full.index));
    for (int o = 0; o < layer.out; ++o) {
      for (int i = 0; i < layer.in; ++i) {
        uint64_t full_index = static_cast<uint64_t>(row_base + o) * layer.full.in + static_cast<uint64_t>(column_base + i);
        params_[layer.weight_at + static_cast<size_t>(o) * layer.in + i] =
            static_cast<float>(bound * uniform(stream + full_index));
      }
    }
  }
}

worker::Status MlpShard::forward(int slot, const double* input, int batch, double* output, const TensorSum& tensor_sum) {
  if (saved_inputs_.size() <= static_cast<size_t>(slot)) {
    saved_inputs_.resize(static_cast<size_t>(slot) + 1);
    saved_batch_.resize(static_cast<size_t>(slot) + 1);
  }
  std::vector<std::vector<double>>& saved = saved_inputs_[static_cast<size_t>(slot)];
  saved.resize(local_.size());
  saved_batch_[static_cast<size_t>(slot)] = batch;
  saved[0].assign(input, input + static_cast<size_t>(batch) * local_[0].in);
  std::vector<double> result;
  for (size_t k = 0; k < local_.size(); ++k) {
    const Layer& layer = local_[k];
    const std::vector<double>& x = saved[k];
    const float* w = &params_[layer.weight_at];
    const float* bias = &params_[layer.bias_at];
    // A row-parallel layer adds its bias once, after the partial sums are summed.
    bool bias_after_sum = layer.full.split == Split::kRow;
    result.assign(static_cast<size_t>(batch) * layer.out, 0.0);
    for (int b = 0; b < batch; ++b) {
      const double* xb = &x[static_cast<size_t>(b) * layer.in];
      for (int o = 0; o < layer.out; ++o) {
        double sum = bias_after_sum ? 0.0 : bias[o];
        const float* row = w + static_cast<size_t>(o) * layer.in;
        for (int i = 0; i < layer.in; ++i) sum += static_cast<double>(row[i]) * xb[i];
        result[static_cast<size_t>(b) * layer.out + o] = sum;
      }
    }
    if (bias_after_sum) {
      if (auto summed = tensor_sum(result.data(), result.size()); !summed) return summed;
      for (int b = 0; b < batch; ++b) {
        for (int o = 0; o < layer.out; ++o) result[static_cast<size_t>(b) * layer.out + o] += bias[o];
      }
    }
    if (layer.full.relu) {
      for (double& value : result) value = std::max(0.0, value);
    }
    if (k + 1 < local_.size()) {
      saved[k + 1] = result;
    } else {
      std::copy(result.begin(), result.end(), output);
    }
  }
  return {};
}

worker::Status MlpShard::backward(int slot, const double* output_grad, double* grad, double* input_grad,
                                  const TensorSum& tensor_sum) {
  std::vector<std::vector<double>>& saved = saved_inputs_.at(static_cast<size_t>(slot));
  int batch = saved_batch_.at(static_cast<size_t>(slot));
  std::vector<double> delta(output_grad, output_grad + static_cast<size_t>(batch) * local_.back().out);
  std::vector<double> input_delta;
  for (size_t k = local_.size(); k-- > 0;) {
    const Layer& layer = local_[k];
    const std::vector<double>& x = saved[k];
    const float* w = &params_[layer.weight_at];
    double* gw = grad + layer.weight_at;
    double* gb = grad + layer.bias_at;
    // The model's first layer needs no input gradient: nothing before it learns.
    bool wants_input = layer.full.index > 0 && (k > 0 || input_grad != nullptr);
    input_delta.assign(wants_input ? static_cast<size_t>(batch) * layer.in : 0, 0.0);
    for (int b = 0; b < batch; ++b) {
      const double* xb = &x[static_cast<size_t>(b) * layer.in];
      double* db = wants_input ? &input_delta[static_cast<size_t>(b) * layer.in] : nullptr;
      for (int o = 0; o < layer.out; ++o) {
        double d = delta[static_cast<size_t>(b) * layer.out + o];
        if (d == 0.0) continue;
        gb[o] += d;
        const float* row = w + static_cast<size_t>(o) * layer.in;
        double* grow = gw + static_cast<size_t>(o) * layer.in;
        for (int i = 0; i < layer.in; ++i) grow[i] += d * xb[i];
        if (db != nullptr) {
          for (int i = 0; i < layer.in; ++i) db[i] += d * row[i];
        }
      }
    }
    if (!wants_input) break;
    // A column-parallel layer saw the whole input but only its slice of outputs: the input
    // gradient is the sum of every slice's part.
    if (layer.full.split == Split::kColumn) {
      if (auto summed = tensor_sum(input_delta.data(), input_delta.size()); !summed) return summed;
    }
    for (size_t i = 0; i < input_delta.size(); ++i) {
      if (x[i] <= 0.0) input_delta[i] = 0.0;  // through the ReLU that produced this input
    }
    delta.swap(input_delta);
  }
  if (input_grad != nullptr && local_.front().full.index > 0) std::copy(delta.begin(), delta.end(), input_grad);
  return {};
}

uint64_t MlpShard::checksum() const {
  uint64_t hash = 0xcbf29ce484222325ull;
  const auto* bytes = reinterpret_cast<const unsigned char*>(params_.data());
  for (size_t i = 0; i < params_.size() * sizeof(float); ++i) {
    hash ^= bytes[i];
    hash *= 0x100000001b3ull;
  }
  return hash;
}

double softmax_cross_entropy(const double* logits, const int* labels, int batch, int classes, double* logits_grad) {
  double loss = 0;
  for (int b = 0; b < batch; ++b) {
    const double* row = logits + static_cast<size_t>(b) * classes;
    double* grad_row = logits_grad + static_cast<size_t>(b) * classes;
    double peak = *std::max_element(row, row + classes);  // computed stably
    double total = 0;
    for (int c = 0; c < classes; ++c) total += std::exp(row[c] - peak);
    loss += std::log(total) - (row[labels[b]] - peak);
    for (int c = 0; c < classes; ++c) grad_row[c] = std::exp(row[c] - peak) / total - (c == labels[b] ? 1.0 : 0.0);
  }
  return loss;
}

}  // namespace dtrain::trainer
