// SwiGLU gate of the feed-forward block: out = silu(h1) ⊙ h3.
//
// h1 and h3 come out of one fused w13 GEMM as h13 = [h1 | h3] (ARCHITECTURE.md decision 3).
// Under tensor parallelism a rank's w13 stacks its slice of w1 over its slice of w3, so the
// local h13 has the same [h1 | h3] layout with F the local ffn width.
#pragma once

#include "core/tensor.h"

namespace titan::model {

// h13 [T, 2F] -> out [T, F]
void swiglu_forward(const Tensor& out, const Tensor& h13);

// -> dh13 [T, 2F] (assigned)
void swiglu_backward(const Tensor& dh13, const Tensor& dout, const Tensor& h13);

}  // namespace titan::model
