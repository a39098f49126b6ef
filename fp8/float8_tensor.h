// Float8Tensor: FP8 codes of a 2-D operand [rows, cols] plus the scales that go with them
// (docs/architecture.md#decision-4). The scaled axis is always the columns — the GEMM's contraction
// axis — so a GEMM operand is quantized in the orientation the GEMM reads it, and a transposed
// use is a separate Float8Tensor quantized from high precision, never a view of this one.
// There is no reshape: the shape and the scales are one object.
//
// Scaling (torchao's convention): scale = fp8_max / max(amax, eps), in fp32;
// code = encode(x · scale); the value a code stands for is decode(code) / scale.
//
//   granularity   scales            one scale per
//   Tensorwise    [1]               whole tensor
//   Rowwise       [rows]            row (torchao's "axiswise" along the contraction axis)
//   Block1x128    [rows, ⌈cols/128⌉] 1 × 128 block of a row (activations, gradients)
//   Block128x128  [⌈rows/128⌉, ⌈cols/128⌉] 128 × 128 tile (weights; DeepSeek-V3)
#pragma once

#include <cstdint>
#include <string_view>

#include "core/tensor.h"
#include "fp8/format.h"

namespace titan::fp8 {

enum class Granularity : uint8_t { Tensorwise, Rowwise, Block1x128, Block128x128 };
std::string_view granularity_name(Granularity granularity);
// The blockwise granularities, whose scales cover 1 × 128 or 128 × 128 tiles.
constexpr bool is_block(Granularity g) {
  return g == Granularity::Block1x128 || g == Granularity::Block128x128;
}

constexpr int64_t kBlock = 128;
// The blocks of kBlock that cover n elements (the last one may be partial).
constexpr int64_t scale_blocks(int64_t n) { return (n + kBlock - 1) / kBlock; }
// amax below this is treated as this (torchao's EPS), so an all-zero tensor gets a finite scale.
constexpr float kAmaxEps = 1e-12f;

struct Float8Tensor {
  Tensor codes;   // [rows, cols] U8: FP8 codes in `format`
  Tensor scales;  // f32, shaped by `granularity` (see above)
  Granularity granularity = Granularity::Tensorwise;
  Format format = Format::E4M3;

  int64_t rows() const { return codes.size(0); }
  int64_t cols() const { return codes.size(1); }
  // The scale that applies to element (r, c); scales on the CPU.
  float scale_at(int64_t r, int64_t c) const;
};

// The shape of the scales of a [rows, cols] operand.
Shape scales_shape(Granularity granularity, int64_t rows, int64_t cols);

// Every function below dispatches on the device of its input: the CPU code here is the oracle
// (f32 inputs only), and on CUDA (f32 or bf16 inputs) the kernels of fp8/cuda/quantize.cu give
// bit-identical scales and codes — same fp32 formula, same SATFINITE rounding.

// amax of x [rows, cols] (f32) at `granularity`: a tensor shaped like the scales.
Tensor compute_amax(const Tensor& x, Granularity granularity);

// scale = fp8_max / max(amax, eps) in f32, element-wise over an amax tensor. With
// `power_of_two`, each scale is rounded down to a power of two (torchao's rowwise recipe), so
// scaling is exact and never pushes a value past fp8_max.
Tensor scales_from_amax(const Tensor& amax, Format format, bool power_of_two);

// Quantizes x [rows, cols] (f32, contiguous) with the given scales (on x's device).
Float8Tensor quantize_with_scales(const Tensor& x, const Tensor& scales, Granularity granularity,
                                  Format format);
// amax → scales → quantize in one call (dynamic scaling).
Float8Tensor quantize(const Tensor& x, Granularity granularity, Format format,
                      bool power_of_two_scales = false);

// quantize(transpose_2d(x), ...): the FP8 codes of xᵀ [cols, rows], scaled along xᵀ's columns
// (x's rows). Hopper's FP8 GEMM is TN-only, so backward needs its transposed operands quantized
// this way; on CUDA one kernel reads x tile by tile and never materialises xᵀ in high precision.
Float8Tensor quantize_transposed(const Tensor& x, Granularity granularity, Format format,
                                 bool power_of_two_scales = false);

// Tensorwise quantization of x [rows, cols] from an amax [1] on x's device taken elsewhere (by
// the op that wrote x, then reduced over tp): quantize_with_scales(x, scales_from_amax(amax)).
// With `transposed`, also xᵀ's codes under the same scale (transpose_tensorwise of the result),
// which on CUDA the same pass over x writes.
Float8Tensor quantize_tensorwise_from_amax(const Tensor& x, const Tensor& amax, Format format,
                                           bool power_of_two, Float8Tensor* transposed = nullptr);

// The f32 values the codes stand for: decode(code) / scale. [rows, cols].
Tensor dequantize(const Float8Tensor& q);

// [rows, cols] -> [cols, rows], contiguous (for the transposed operands of backward's GEMMs).
Tensor transpose_2d(const Tensor& x);

// The transpose of a tensorwise Float8Tensor: the codes transposed, the one scale kept. Exactly
// what quantizing the transposed high-precision tensor with that scale gives, which is why only
// tensorwise scaling may take this shortcut (a row scale of Aᵀ is a column scale of A).
Float8Tensor transpose_tensorwise(const Float8Tensor& q);

#if TITAN_CUDA
// The CUDA twins of the functions above, for tensors on a CUDA device (fp8/cuda/quantize.cu).
// Inputs are contiguous 2-D f32 or bf16; every kernel runs on titan::cuda::current_stream() and
// none synchronises with the host (tensorwise scales are computed on the device).
Tensor compute_amax_cuda(const Tensor& x, Granularity granularity);
Tensor scales_from_amax_cuda(const Tensor& amax, Format format, bool power_of_two);
Float8Tensor quantize_with_scales_cuda(const Tensor& x, const Tensor& scales,
                                       Granularity granularity, Format format);
Float8Tensor quantize_cuda(const Tensor& x, Granularity granularity, Format format,
                           bool power_of_two_scales);
Float8Tensor quantize_transposed_cuda(const Tensor& x, Granularity granularity, Format format,
                                      bool power_of_two_scales);
Float8Tensor quantize_tensorwise_from_amax_cuda(const Tensor& x, const Tensor& amax, Format format,
                                                bool power_of_two, Float8Tensor* transposed);
Tensor dequantize_cuda(const Float8Tensor& q);
Tensor transpose_2d_cuda(const Tensor& x);  // f32 -> f32, bf16 -> bf16
Float8Tensor transpose_tensorwise_cuda(const Float8Tensor& q);
#endif

}  // namespace titan::fp8
