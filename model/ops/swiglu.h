// SwiGLU gate of the feed-forward block: out = silu(h1) ⊙ h3.
//
// h1 and h3 come out of one fused w13 GEMM as h13 = [h1 | h3] (docs/architecture.md#decision-3).
// Under tensor parallelism a rank's w13 stacks its slice of w1 over its slice of w3, so the
// local h13 has the same [h1 | h3] layout with F the local ffn width.
#pragma once

#include "core/tensor.h"

namespace titan::model {

// h13 [T, 2F] -> out [T, F]. One dtype: f32 or f64 on the CPU, f32 or bf16 on CUDA.
void swiglu_forward(const Tensor& out, const Tensor& h13);

// -> dh13 [T, 2F] (assigned)
void swiglu_backward(const Tensor& dh13, const Tensor& dout, const Tensor& h13);

// The CUDA twins (swiglu.cu); swiglu_forward and swiglu_backward call them for CUDA tensors.
void swiglu_forward_cuda(const Tensor& out, const Tensor& h13);
void swiglu_backward_cuda(const Tensor& dh13, const Tensor& dout, const Tensor& h13);

}  // namespace titan::model
