// The FP8 GEMM: out[M, N] (+)= A[M, K] · B[N, K]ᵀ with both operands FP8, scaled along K, and
// fp32 accumulation — cuBLASLt's "TN" FP8 matmul, emulated exactly on the CPU:
//
//   tensorwise, rowwise   out[m, n] = (Σ_k a[m,k]·b[n,k]) / (sa[m]·sb[n])
//   blockwise             out[m, n] = Σ_blocks (Σ_{k in block} a[m,k]·b[n,k]) / (sa[m,blk]·sb[n',blk])
//
// where a, b are the FP8 values (decode of the codes). Products of two FP8 values are exact in
// fp32 (4 + 4 significant bits), sums round in fp32 as the tensor cores' accumulators do, and
// the scales apply after each K block as cuBLASLt's block scaling does. This is the oracle the
// CUDA path is tested against.
#pragma once

#include "fp8/float8_tensor.h"

namespace titan::fp8 {

// out [M, N] f32. accumulate: out += result, else out = result.
void scaled_gemm(const Float8Tensor& a, const Float8Tensor& b, const Tensor& out, bool accumulate);

}  // namespace titan::fp8
