#include "worker/trainer/model.h"

#include <algorithm>
#include <cmath>

#include "worker/trainer/data.h"

namespace dtrain::trainer {

Mlp::Mlp(int inputs, int hidden, int layers, int classes, uint64_t seed) {
  widths_.push_back(inputs);
  for (int l = 0; l < layers; ++l) widths_.push_back(hidden);
  widths_.push_back(classes);
  size_t offset = 0;
  for (size_t l = 0; l + 1 < widths_.size(); ++l) {
    weight_at_.push_back(offset);
    offset += static_cast<size_t>(widths_[l]) * widths_[l + 1];
    bias_at_.push_back(offset);
    offset += static_cast<size_t>(widths_[l + 1]);
  }
  params_.assign(offset, 0.0f);
  for (size_t l = 0; l + 1 < widths_.size(); ++l) {
    double bound = std::sqrt(6.0 / widths_[l]);
    size_t count = static_cast<size_t>(widths_[l]) * widths_[l + 1];
    for (size_t i = 0; i < count; ++i) {
      params_[weight_at_[l] + i] = static_cast<float>(bound * uniform(hash64(seed * 1000003 + l) + i));
    }
  }
  activations_.resize(widths_.size());
  deltas_.resize(widths_.size());
  for (size_t l = 0; l < widths_.size(); ++l) {
    activations_[l].resize(widths_[l]);
    deltas_[l].resize(widths_[l]);
  }
}

double Mlp::accumulate(const double* x, int label, double* grad) {
  size_t last = widths_.size() - 1;
  std::copy(x, x + widths_[0], activations_[0].begin());
  for (size_t l = 0; l < last; ++l) {
    int in = widths_[l], out = widths_[l + 1];
    const float* w = &params_[weight_at_[l]];
    const float* b = &params_[bias_at_[l]];
    for (int o = 0; o < out; ++o) {
      double sum = b[o];
      const float* row = w + static_cast<size_t>(o) * in;
      for (int i = 0; i < in; ++i) sum += static_cast<double>(row[i]) * activations_[l][i];
      activations_[l + 1][o] = (l + 1 == last) ? sum : std::max(0.0, sum);
    }
  }
  // Softmax cross-entropy on the logits, computed stably.
  std::vector<double>& logits = activations_[last];
  double peak = *std::max_element(logits.begin(), logits.end());
  double total = 0;
  for (double logit : logits) total += std::exp(logit - peak);
  double loss = std::log(total) - (logits[label] - peak);
  for (int c = 0; c < widths_[last]; ++c) {
    deltas_[last][c] = std::exp(logits[c] - peak) / total - (c == label ? 1.0 : 0.0);
  }
  for (size_t l = last; l-- > 0;) {
    int in = widths_[l], out = widths_[l + 1];
    const float* w = &params_[weight_at_[l]];
    double* gw = grad + weight_at_[l];
    double* gb = grad + bias_at_[l];
    std::fill(deltas_[l].begin(), deltas_[l].end(), 0.0);
    for (int o = 0; o < out; ++o) {
      double delta = deltas_[l + 1][o];
      if (delta == 0.0) continue;
      gb[o] += delta;
      const float* row = w + static_cast<size_t>(o) * in;
      double* grow = gw + static_cast<size_t>(o) * in;
      for (int i = 0; i < in; ++i) {
        grow[i] += delta * activations_[l][i];
        deltas_[l][i] += delta * row[i];
      }
    }
    if (l > 0) {  // through the ReLU of layer l
      for (int i = 0; i < in; ++i) {
        if (activations_[l][i] <= 0.0) deltas_[l][i] = 0.0;
      }
    }
  }
  return loss;
}

uint64_t Mlp::checksum() const {
  uint64_t hash = 0xcbf29ce484222325ull;
  const auto* bytes = reinterpret_cast<const unsigned char*>(params_.data());
  for (size_t i = 0; i < params_.size() * sizeof(float); ++i) {
    hash ^= bytes[i];
    hash *= 0x100000001b3ull;
  }
  return hash;
}

}  // namespace dtrain::trainer
