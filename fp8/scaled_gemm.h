// The FP8 GEMM: out[M, N] (+)= A[M, K] · B[N, K]ᵀ with both operands FP8, scaled along K, and
// fp32 accumulation — cuBLASLt's "TN" FP8 matmul, emulated on the CPU:
//
//   tensorwise, rowwise   out[m, n] = (Σ_k a[m,k]·b[n,k]) / (sa[m]·sb[n])
//   blockwise             out[m, n] = Σ_blocks (Σ_{k in block} a[m,k]·b[n,k]) / (sa[m,blk]·sb[n',blk])
//
// where a, b are the FP8 values (decode of the codes). Products of two FP8 values are exact in
// fp32 (4 + 4 significant bits), sums round in fp32, and the scales apply after each K block as
// cuBLASLt's block scaling does. This is the oracle the CUDA path is tested against. Hopper's
// FP8 tensor cores add the products in an accumulator of about 14 significant bits that
// cuBLASLt promotes into fp32 every few k-steps, so cuBLASLt agrees with it to ~1e-4 relative
// (measured on H100, test/gpu/test_fp8_cuda.cpp), not to fp32 rounding.
#pragma once

#include "fp8/float8_tensor.h"

namespace titan::fp8 {

// out [M, N] f32 (or, on CUDA, bf16). accumulate: out += result, else out = result.
// fast_accumulation selects cuBLASLt's FP8 fast-accumulation mode (CUBLASLT_MATMUL_DESC_FAST_ACCUM:
// the tensor cores' partial sums are not periodically promoted to full fp32), which
// TransformerEngine and torchao use for the forward GEMM only. Block scaling promotes after
// every 128-wide K block anyway, so it ignores the flag; so does the CPU emulation.
// Operands on CUDA go to cuBLASLt (fp8/cuda/scaled_gemm_cublaslt.cpp), on the CPU to the
// emulation, which is the oracle.
void scaled_gemm(const Float8Tensor& a, const Float8Tensor& b, const Tensor& out, bool accumulate,
                 bool fast_accumulation = false);

#if TITAN_CUDA
// The cuBLASLt FP8 GEMM (fp8/cuda/scaled_gemm_cublaslt.cpp). Needs compute capability 8.9 for
// tensorwise scaling and 9.0 for rowwise (outer-vector) and block scaling; M, N, K multiples of
// 16. Refuses any of that with an error that says so.
void scaled_gemm_cuda(const Float8Tensor& a, const Float8Tensor& b, const Tensor& out,
                      bool accumulate, bool fast_accumulation);
#endif

}  // namespace titan::fp8
