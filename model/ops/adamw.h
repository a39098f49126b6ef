// One AdamW update of a parameter (or of this rank's shard of it), in place.
//
// Decoupled weight decay (Loshchilov & Hutter), bias-corrected moments, as torch.optim.AdamW:
//   p ← p·(1 − lr·wd);  m ← β1·m + (1−β1)·g;  v ← β2·v + (1−β2)·g²
//   p ← p − lr/(1−β1ᵗ) · m / (sqrt(v)/sqrt(1−β2ᵗ) + eps)
// The master weights and moments are fp32 (f64 in gradient checks); on CUDA the kernel also
// writes the bf16 working copy the forward pass reads.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace titan::model {

struct AdamWHyper {
  double lr = 0;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;
  int64_t step = 1;  // 1-based, for the bias corrections
};

// param, exp_avg, exp_avg_sq, grad: same shape; the first three are updated in place.
void adamw_step(const Tensor& param, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                const Tensor& grad, const AdamWHyper& hyper);

}  // namespace titan::model
