// One AdamW update of a parameter (or of this rank's shard of it), in place.
//
// Decoupled weight decay (Loshchilov & Hutter), bias-corrected moments, as torch.optim.AdamW:
//   p ← p·(1 − lr·wd);  m ← β1·m + (1−β1)·g;  v ← β2·v + (1−β2)·g²
//   p ← p − lr/(1−β1ᵗ) · m / (sqrt(v)/sqrt(1−β2ᵗ) + eps)
// The master weights and moments are fp32 (f64 in gradient checks); the step can also write the
// bf16 working copy the forward pass reads.
#pragma once

#include <cmath>
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

// The step's scalars, rounded to T once on the host. Both twins take them from here, so the
// CPU and CUDA updates start from the same bits.
template <class T>
struct AdamWScalars {
  T step_size;       // lr / (1 − β1ᵗ)
  T inv_sqrt_bias2;  // 1 / sqrt(1 − β2ᵗ)
  T decay;           // 1 − lr·wd
  T beta1, one_minus_beta1, beta2, one_minus_beta2, eps;
};

template <class T>
AdamWScalars<T> adamw_scalars(const AdamWHyper& h) {
  const double bias1 = 1.0 - std::pow(h.beta1, static_cast<double>(h.step));
  const double bias2 = 1.0 - std::pow(h.beta2, static_cast<double>(h.step));
  const T b1 = static_cast<T>(h.beta1), b2 = static_cast<T>(h.beta2);
  return {static_cast<T>(h.lr / bias1),
          static_cast<T>(1.0 / std::sqrt(bias2)),
          static_cast<T>(1.0 - h.lr * h.weight_decay),
          b1,
          T(1) - b1,
          b2,
          T(1) - b2,
          static_cast<T>(h.eps)};
}

// param, exp_avg, exp_avg_sq, grad: same shape; the first three are updated in place. One
// dtype: f32 or f64 on the CPU, f32 on CUDA (fp32 master weights). The two moments may instead
// be bf16 beside f32 ones (optimizer.state_dtype bfloat16): each is read widened, updated in f32
// as above, the step taken with the f32 values, and stored rounded to nearest even. When bf16_param is given
// (same shape, bf16, param f32) it receives the updated param rounded to nearest even: the
// working copy the forward pass reads, written in the same pass.
void adamw_step(const Tensor& param, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                const Tensor& grad, const AdamWHyper& hyper, const Tensor& bf16_param = Tensor());

// The CUDA twin (adamw.cu); adamw_step calls it for CUDA tensors. Same arithmetic as the CPU
// twin, in the same order and without FMA contraction, so the two agree bit for bit.
void adamw_step_cuda(const Tensor& param, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                     const Tensor& grad, const AdamWHyper& hyper, const Tensor& bf16_param);

}  // namespace titan::model
