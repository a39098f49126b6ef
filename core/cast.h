// Element type conversion: f32 ↔ f64 ↔ bf16 (round-to-nearest-even) on the CPU.
// Tests use it to run the float ops against double references; bf16 storage is emulated with it.
#pragma once

#include "core/tensor.h"

namespace titan {

// A new contiguous tensor of `dtype` holding `src`'s values (a copy even when dtypes match).
Tensor cast(const Tensor& src, DType dtype);

}  // namespace titan
