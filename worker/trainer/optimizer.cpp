#include "worker/trainer/optimizer.h"

namespace dtrain::trainer {

void SgdMomentum::step(std::vector<float>& params, const double* grad) {
  for (std::size_t i = 0; i < params.size(); ++i) {
    velocity_[i] = static_cast<float>(momentum_ * velocity_[i] + grad[i]);
    params[i] = static_cast<float>(params[i] - lr_ * velocity_[i]);
  }
}

}  // namespace dtrain::trainer
