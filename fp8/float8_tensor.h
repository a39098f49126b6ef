// Float8Tensor: FP8 codes of a 2-D operand [rows, cols] plus the scales that go with them
// (ARCHITECTURE.md decision 4). The scaled axis is always the columns — the GEMM's contraction
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

constexpr int64_t kBlock = 128;
// amax below this is treated as this (torchao's EPS), so an all-zero tensor gets a finite scale.
constexpr float kAmaxEps = 1e-12f;

struct Float8Tensor {
  Tensor codes;   // [rows, cols] U8: FP8 codes in `format`
  Tensor scales;  // f32, shaped by `granularity` (see above)
  Granularity granularity = Granularity::Tensorwise;
  Format format = Format::E4M3;

  int64_t rows() const { return codes.size(0); }
  int64_t cols() const { return codes.size(1); }
  // The scale that applies to element (r, c).
  float scale_at(int64_t r, int64_t c) const;
};

// The shape of the scales of a [rows, cols] operand.
Shape scales_shape(Granularity granularity, int64_t rows, int64_t cols);

// amax of x [rows, cols] (f32) at `granularity`: a tensor shaped like the scales.
Tensor compute_amax(const Tensor& x, Granularity granularity);

// scale = fp8_max / max(amax, eps) in f32, element-wise over an amax tensor. With
// `power_of_two`, each scale is rounded down to a power of two (torchao's rowwise recipe), so
// scaling is exact and never pushes a value past fp8_max.
Tensor scales_from_amax(const Tensor& amax, Format format, bool power_of_two);

// Quantizes x [rows, cols] (f32, contiguous) with the given scales.
Float8Tensor quantize_with_scales(const Tensor& x, const Tensor& scales, Granularity granularity,
                                  Format format);
// amax → scales → quantize in one call (dynamic scaling).
Float8Tensor quantize(const Tensor& x, Granularity granularity, Format format,
                      bool power_of_two_scales = false);

// The f32 values the codes stand for: decode(code) / scale. [rows, cols].
Tensor dequantize(const Float8Tensor& q);

// [rows, cols] -> [cols, rows], contiguous (for the transposed operands of backward's GEMMs).
Tensor transpose_2d(const Tensor& x);

// The transpose of a tensorwise Float8Tensor: the codes transposed, the one scale kept. Exactly
// what quantizing the transposed high-precision tensor with that scale gives, which is why only
// tensorwise scaling may take this shortcut (a row scale of Aᵀ is a column scale of A).
Float8Tensor transpose_tensorwise(const Float8Tensor& q);

}  // namespace titan::fp8
