// The scales cuBLASLt's FP8 matmul reads, made from a Float8Tensor's: cuBLASLt multiplies the
// accumulator by DEQUANT scales, ours are QUANT scales (value = decode(code) / scale), so each
// is replaced by 1 / scale — the same fp32 reciprocal the CPU emulation takes — and laid out
// as the scale mode expects for an operand [rows, K] stored K-contiguous (row-major here,
// column-major K × rows in cuBLASLt's terms):
//
//   granularity   scale mode       buffer (f32)                     element (r, kb) at
//   Tensorwise    SCALAR_32F       [1]                              0
//   Rowwise       OUTER_VEC_32F    [rows]                           r
//   Block1x128    VEC128_32F       [⌈K/128⌉, ld], ld = rows↑4       kb · ld + r   (rows-major)
//   Block128x128  BLK128x128_32F   [⌈rows/128⌉, ld], ld = ⌈K/128⌉↑4 (r/128) · ld + kb
//
// (n↑4: n rounded up to a multiple of 4, i.e. 16-byte leading dimensions; padding holds 0.)
// These are the layouts PyTorch's _scaled_mm checks before handing scales to cuBLASLt
// (aten/src/ATen/native/cuda/ScaledBlas.cpp: is_blockwise_1x128_scaling wants the 1x128
// scales outer-dim-major with stride rows; is_blockwise_128x128_scaling wants the tile
// scales K-block-contiguous with the row stride rounded up to 4), and what cuBLAS documents
// under "Scaling factor layouts" (https://docs.nvidia.com/cuda/cublas/#scaling-factor-layouts).
#pragma once

#include "core/tensor.h"
#include "fp8/float8_tensor.h"

namespace titan::fp8 {

// A fresh device buffer for q's scales (q's codes and scales on CUDA), laid out as above.
// Implemented in fp8/cuda/gemm_scales.cu.
Tensor cublaslt_dequant_scales(const Float8Tensor& q);

}  // namespace titan::fp8
