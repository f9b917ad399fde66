#include "worker/trainer/data.h"

#include <cmath>

namespace dtrain::trainer {

uint64_t hash64(uint64_t key) {
  uint64_t z = key + 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

double uniform(uint64_t key) {
  return static_cast<double>(hash64(key) >> 11) * (2.0 / 9007199254740992.0) - 1.0;
}

SyntheticData::SyntheticData(int inputs, int classes, uint64_t seed)
    : inputs_(inputs), classes_(classes), seed_(seed) {
  auto init = [&](std::vector<double>& values, size_t count, double scale, uint64_t stream) {
    values.resize(count);
    for (size_t i = 0; i < count; ++i) values[i] = scale * uniform(hash64(seed ^ (stream << 56)) + i);
  };
  // Teacher weights: wide enough that several classes win regularly.
  init(w1_, static_cast<size_t>(teacher_hidden_) * inputs, 2.0 / std::sqrt(inputs), 1);
  init(b1_, teacher_hidden_, 0.5, 2);
  init(w2_, static_cast<size_t>(classes) * teacher_hidden_, 2.0 / std::sqrt(teacher_hidden_), 3);
  init(b2_, classes, 0.1, 4);
}

int SyntheticData::sample(uint64_t index, double* x) const {
  uint64_t base = hash64(seed_ ^ 0x5EEDull) ^ (index * 0x100000001B3ull);
  for (int j = 0; j < inputs_; ++j) x[j] = std::sqrt(3.0) * uniform(hash64(base + static_cast<uint64_t>(j)));
  std::vector<double> hidden(teacher_hidden_);
  for (int h = 0; h < teacher_hidden_; ++h) {
    double sum = b1_[h];
    for (int j = 0; j < inputs_; ++j) sum += w1_[static_cast<size_t>(h) * inputs_ + j] * x[j];
    hidden[h] = std::tanh(sum);
  }
  int best = 0;
  double best_logit = -1e300;
  for (int c = 0; c < classes_; ++c) {
    double logit = b2_[c];
    for (int h = 0; h < teacher_hidden_; ++h) logit += w2_[static_cast<size_t>(c) * teacher_hidden_ + h] * hidden[h];
    if (logit > best_logit) {
      best_logit = logit;
      best = c;
    }
  }
  return best;
}

}  // namespace dtrain::trainer
