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

// The residual add fused with the norm that reads its sum (the block's h = x + wo(…), then
// ffn_norm(h)): h += residual [T, D], then rmsnorm_forward of h. Exactly accumulate then
// rmsnorm_forward, bit for bit; on CUDA one kernel instead of two, the row read once fewer.
void add_rmsnorm_forward(const Tensor& y, const Tensor& rstd, const Tensor& h,
                         const Tensor& residual, const Tensor& weight, double eps);

// rmsnorm_backward with the residual path's gradient added to dx: dx = the norm's dx +
// dresidual [T, D]. Exactly rmsnorm_backward then accumulate(dx, dresidual), bit for bit; on
// CUDA the add rides in the dx kernel.
void rmsnorm_backward_add(const Tensor& dx, const Tensor& dweight, const Tensor& dy,
                          const Tensor& x, const Tensor& weight, const Tensor& rstd,
                          const Tensor& dresidual);

// The CUDA twins (rmsnorm.cu); the functions above call them for CUDA tensors.
void rmsnorm_forward_cuda(const Tensor& y, const Tensor& rstd, const Tensor& x,
                          const Tensor& weight, double eps);
void rmsnorm_backward_cuda(const Tensor& dx, const Tensor& dweight, const Tensor& dy,
                           const Tensor& x, const Tensor& weight, const Tensor& rstd);
void add_rmsnorm_forward_cuda(const Tensor& y, const Tensor& rstd, const Tensor& h,
                              const Tensor& residual, const Tensor& weight, double eps);
void rmsnorm_backward_add_cuda(const Tensor& dx, const Tensor& dweight, const Tensor& dy,
                               const Tensor& x, const Tensor& weight, const Tensor& rstd,
                               const Tensor& dresidual);

}  // namespace titan::model
