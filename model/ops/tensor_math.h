// The few whole-tensor arithmetic ops training needs besides the layers: residual adds,
// gradient scaling, and the sum of squares behind the global gradient norm.
#pragma once

#include "core/tensor.h"

namespace titan::model {

// acc += x (same shape). The residual connections' forward, and gradient merges in backward.
void accumulate(const Tensor& acc, const Tensor& x);

// t *= factor. Gradient clipping.
void scale_inplace(const Tensor& t, double factor);

// Σ t², accumulated in double. One term of the global gradient norm.
double sum_of_squares(const Tensor& t);

}  // namespace titan::model
