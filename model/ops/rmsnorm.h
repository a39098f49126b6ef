// RMSNorm: y = x / sqrt(mean(x²) + eps) ⊙ weight, row by row.
//
// Forward keeps rstd[t] = 1 / sqrt(mean(x[t]²) + eps) so that backward need not recompute the
// row statistics. Under sequence parallelism each rank normalises its own rows; the weight
// gradient is then a partial sum that parallel/ reduces over the tp group.
#pragma once

#include "core/tensor.h"

namespace titan::model {

// x [T, D], weight [D] -> y [T, D], rstd [T]. On CUDA x, weight, y may be f32 or bf16 (one
// dtype) and rstd is f32; on the CPU every tensor has x's dtype (f32 or f64).
void rmsnorm_forward(const Tensor& y, const Tensor& rstd, const Tensor& x, const Tensor& weight,
                     double eps);

// dx [T, D] (assigned), dweight [D] (+=). On CUDA dweight is f32 (gradients accumulate in
// fp32) and the rest as in forward.
void rmsnorm_backward(const Tensor& dx, const Tensor& dweight, const Tensor& dy, const Tensor& x,
                      const Tensor& weight, const Tensor& rstd);

// The CUDA twins (rmsnorm.cu); rmsnorm_forward and rmsnorm_backward call them for CUDA tensors.
void rmsnorm_forward_cuda(const Tensor& y, const Tensor& rstd, const Tensor& x,
                          const Tensor& weight, double eps);
void rmsnorm_backward_cuda(const Tensor& dx, const Tensor& dweight, const Tensor& dy,
                           const Tensor& x, const Tensor& weight, const Tensor& rstd);

}  // namespace titan::model
