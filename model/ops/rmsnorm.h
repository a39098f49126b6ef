// RMSNorm: y = x / sqrt(mean(x²) + eps) ⊙ weight, row by row.
//
// Forward keeps rstd[t] = 1 / sqrt(mean(x[t]²) + eps) so that backward need not recompute the
// row statistics. Under sequence parallelism each rank normalises its own rows; the weight
// gradient is then a partial sum that parallel/ reduces over the tp group.
#pragma once

#include "core/tensor.h"

namespace titan::model {

// x [T, D], weight [D] -> y [T, D], rstd [T]
void rmsnorm_forward(const Tensor& y, const Tensor& rstd, const Tensor& x, const Tensor& weight,
                     double eps);

// dx [T, D] (assigned), dweight [D] (+=)
void rmsnorm_backward(const Tensor& dx, const Tensor& dweight, const Tensor& dy, const Tensor& x,
                      const Tensor& weight, const Tensor& rstd);

}  // namespace titan::model
