// The dtypes the model computes in follow its weights: the model knows nothing about mixed
// precision (docs/architecture.md#decision-2). parallel/ hands it bf16 weights on CUDA (fp32 master
// weights stay with the optimizer) and f32 or f64 weights on the CPU; activations take the weights'
// dtype and device, and the per-row statistics take stats_dtype of it.
#pragma once

#include "core/dtype.h"

namespace titan::model {

// rstd, lse, row max, sum of exponentials, losses: fp32 when the activations are bf16 (the rule
// of every CUDA kernel), else the activations' own dtype (the CPU computes in one dtype).
inline DType stats_dtype(DType activations) {
  return activations == DType::BF16 ? DType::F32 : activations;
}

}  // namespace titan::model
