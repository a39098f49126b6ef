#include "model/optim/lr_scheduler.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace titan::model {

LrScheduler::LrScheduler(double base_lr, int64_t total_steps, int64_t warmup_steps,
                         std::optional<double> decay_ratio, DecayType decay_type,
                         double min_lr_factor)
    : base_lr_(base_lr), type_(decay_type), min_factor_(min_lr_factor) {
  warmup_ = std::clamp<int64_t>(warmup_steps, 0, total_steps);
  if (decay_ratio) {
    decay_ = static_cast<int64_t>(std::llround(static_cast<double>(total_steps) * *decay_ratio));
    decay_ = std::min(decay_, total_steps - warmup_);
  } else {
    decay_ = total_steps - warmup_;
  }
  stable_ = total_steps - warmup_ - decay_;
}

double LrScheduler::lr(int64_t step) const {
  double factor = 1.0;
  if (step < warmup_) {
    factor = static_cast<double>(step + 1) / static_cast<double>(warmup_ + 1);
  } else if (step >= warmup_ + stable_ && decay_ > 0) {
    double progress = std::min(
        1.0, static_cast<double>(step + 1 - warmup_ - stable_) / static_cast<double>(decay_));
    double shape = 1.0;
    switch (type_) {
      case DecayType::Linear: shape = 1.0 - progress; break;
      case DecayType::Sqrt: shape = 1.0 - std::sqrt(progress); break;
      case DecayType::Cosine: shape = 0.5 * (1.0 + std::cos(std::numbers::pi * progress)); break;
    }
    factor = min_factor_ + (1.0 - min_factor_) * shape;
  }
  return base_lr_ * factor;
}

}  // namespace titan::model
