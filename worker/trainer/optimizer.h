#pragma once
// SGD with momentum, PyTorch's form: v = momentum * v + g; p -= lr * v.

#include <cstddef>
#include <vector>

namespace dtrain::trainer {

class SgdMomentum {
 public:
  SgdMomentum(std::size_t count, double lr, double momentum) : velocity_(count, 0.0f), lr_(lr), momentum_(momentum) {}
  /// `grad` is the mean gradient over the global batch.
  void step(std::vector<float>& params, const double* grad);
  std::vector<float>& velocity() { return velocity_; }

 private:
  std::vector<float> velocity_;
  double lr_;
  double momentum_;
};

}  // namespace dtrain::trainer
