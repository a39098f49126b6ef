// Learning-rate schedule: linear warmup, an optional stable phase, then decay to a floor
// (warmup-stable-decay, torchtitan's lr_scheduler section).
//
//   steps [0, warmup)                  lr · (step+1)/(warmup+1)
//   steps [warmup, warmup + stable)    lr
//   the last `decay` steps             lr · (min_factor + (1 − min_factor) · shape(progress))
//
// with shape = 1 − p (linear), 1 − sqrt(p) (sqrt) or (1 + cos πp)/2 (cosine). decay_ratio
// sets the decay phase to that fraction of all steps; without it, decay takes every step after
// warmup and there is no stable phase.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "core/enum_names.h"

namespace titan::model {

enum class DecayType { Linear, Sqrt, Cosine };
inline constexpr EnumName<DecayType> kDecayTypeList[] = {
    {DecayType::Linear, "linear"}, {DecayType::Sqrt, "sqrt"}, {DecayType::Cosine, "cosine"}};
inline constexpr EnumNames<DecayType> kDecayTypes{"decay", kDecayTypeList};

class LrScheduler {
 public:
  LrScheduler(double base_lr, int64_t total_steps, int64_t warmup_steps,
              std::optional<double> decay_ratio, DecayType decay_type, double min_lr_factor);

  // The learning rate of 0-based optimizer step `step`.
  double lr(int64_t step) const;

  int64_t warmup_steps() const { return warmup_; }
  int64_t stable_steps() const { return stable_; }
  int64_t decay_steps() const { return decay_; }

 private:
  double base_lr_;
  int64_t warmup_, stable_, decay_;
  DecayType type_;
  double min_factor_;
};

}  // namespace titan::model
