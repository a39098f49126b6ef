// Element type conversion: f32 ↔ f64 ↔ bf16 (round-to-nearest-even), on the CPU or on CUDA.
// Tests use it to run the float ops against double references; on CUDA mixed precision casts
// the fp32 master weights to the bf16 copies the model computes with.
#pragma once

#include "core/tensor.h"

namespace titan {

// A new contiguous tensor of `dtype` holding `src`'s values (a copy even when dtypes match).
Tensor cast(const Tensor& src, DType dtype);

// dst = src converted, into existing storage: same shape, same device, dst contiguous.
void cast_into(const Tensor& dst, const Tensor& src);

}  // namespace titan
