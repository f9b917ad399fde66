#pragma once
// The synthetic data set: sample n's inputs come from a counter-based generator keyed by
// (seed, n), and its label from a fixed random "teacher" network. Any sample is reproducible
// from its index alone, so every rank can take any share of a batch without sharing data.

#include <cstdint>
#include <vector>

namespace dtrain::trainer {

/// splitmix64 of a key: a counter-based random number (no state, no order dependence).
uint64_t hash64(uint64_t key);
/// Uniform in [-1, 1) from a key.
double uniform(uint64_t key);

class SyntheticData {
 public:
  SyntheticData(int inputs, int classes, uint64_t seed);
  /// Fills `x` (inputs values) and returns the label of sample `index`.
  int sample(uint64_t index, double* x) const;
  int inputs() const { return inputs_; }

 private:
  int inputs_;
  int classes_;
  int teacher_hidden_ = 32;
  uint64_t seed_;
  std::vector<double> w1_, b1_, w2_, b2_;
};

}  // namespace dtrain::trainer
