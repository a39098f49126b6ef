#include "fp8/float8_tensor.h"

#include <algorithm>
#include <bit>
#include <cmath>

#include "core/check.h"

namespace titan::fp8 {

namespace {

void require_2d_f32(const Tensor& x, const char* what) {
  TT_CHECK(x.device().is_cpu(), what, ": a ", x.device(), " tensor ", x,
           " reached the CPU path (this build has no CUDA kernels for it)");
  TT_CHECK(x.ndim() == 2 && x.dtype() == DType::F32 && x.is_contiguous(), what,
           ": needs a contiguous 2-D f32 operand [rows, cols], got ", x);
}

// The index into the flat scales of element (r, c).
int64_t scale_index(Granularity g, int64_t cols, int64_t r, int64_t c) {
  switch (g) {
    case Granularity::Tensorwise: return 0;
    case Granularity::Rowwise: return r;
    case Granularity::Block1x128: return r * scale_blocks(cols) + c / kBlock;
    case Granularity::Block128x128: return (r / kBlock) * scale_blocks(cols) + c / kBlock;
  }
  return 0;
}

}  // namespace

std::string_view granularity_name(Granularity granularity) {
  switch (granularity) {
    case Granularity::Tensorwise: return "tensorwise";
    case Granularity::Rowwise: return "rowwise";
    case Granularity::Block1x128: return "1x128 blocks";
    case Granularity::Block128x128: return "128x128 blocks";
  }
  return "?";
}

Shape scales_shape(Granularity granularity, int64_t rows, int64_t cols) {
  switch (granularity) {
    case Granularity::Tensorwise: return Shape{1};
    case Granularity::Rowwise: return Shape{rows};
    case Granularity::Block1x128: return Shape{rows, scale_blocks(cols)};
    case Granularity::Block128x128: return Shape{scale_blocks(rows), scale_blocks(cols)};
  }
  return Shape{1};
}

float Float8Tensor::scale_at(int64_t r, int64_t c) const {
  return scales.data<float>()[scale_index(granularity, cols(), r, c)];
}

Tensor compute_amax(const Tensor& x, Granularity granularity) {
#if TITAN_CUDA
  if (x.device().is_cuda()) return compute_amax_cuda(x, granularity);
#endif
  require_2d_f32(x, "compute_amax");
  const int64_t rows = x.size(0), cols = x.size(1);
  Tensor amax = Tensor::zeros(scales_shape(granularity, rows, cols), DType::F32);
  float* out = amax.data<float>();
  const float* in = x.data<float>();
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      float& m = out[scale_index(granularity, cols, r, c)];
      m = std::max(m, std::fabs(in[r * cols + c]));  // a NaN input leaves m: caught by the loss
    }
  }
  return amax;
}

Tensor scales_from_amax(const Tensor& amax, Format format, bool power_of_two) {
#if TITAN_CUDA
  if (amax.device().is_cuda()) return scales_from_amax_cuda(amax, format, power_of_two);
#endif
  TT_CHECK(amax.device().is_cpu() && amax.dtype() == DType::F32 && amax.is_contiguous(),
           "scales_from_amax: needs a contiguous f32 amax, got ", amax);
  Tensor scales = Tensor::empty(amax.shape(), DType::F32);
  const float fp8_max = max_finite(format);
  for (int64_t i = 0; i < amax.numel(); ++i) {
    float scale = fp8_max / std::max(amax.data<float>()[i], kAmaxEps);
    // Round down to a power of two, 2^floor(log2(scale)): keep the exponent, clear the mantissa
    // (scale is a positive normal f32: fp8_max / eps is far below the f32 max).
    if (power_of_two) {
      scale = std::bit_cast<float>(std::bit_cast<uint32_t>(scale) & 0xFF800000u);
    }
    scales.data<float>()[i] = scale;
  }
  return scales;
}

Float8Tensor quantize_with_scales(const Tensor& x, const Tensor& scales, Granularity granularity,
                                  Format format) {
#if TITAN_CUDA
  if (x.device().is_cuda()) return quantize_with_scales_cuda(x, scales, granularity, format);
#endif
  require_2d_f32(x, "quantize");
  const int64_t rows = x.size(0), cols = x.size(1);
  TT_CHECK(scales.dtype() == DType::F32 && scales.shape() == scales_shape(granularity, rows, cols),
           "quantize: scales ", scales, " for a ", granularity_name(granularity), " [", rows, ", ",
           cols, "] operand");
  Float8Tensor q;
  q.codes = Tensor::empty({rows, cols}, format == Format::E4M3 ? DType::E4M3 : DType::E5M2);
  q.scales = scales;
  q.granularity = granularity;
  q.format = format;
  const float* in = x.data<float>();
  const float* s = scales.data<float>();
  auto* out = static_cast<uint8_t*>(q.codes.raw_data());
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      out[r * cols + c] =
          encode(in[r * cols + c] * s[scale_index(granularity, cols, r, c)], format);
    }
  }
  return q;
}

Float8Tensor quantize(const Tensor& x, Granularity granularity, Format format,
                      bool power_of_two_scales) {
#if TITAN_CUDA
  if (x.device().is_cuda()) return quantize_cuda(x, granularity, format, power_of_two_scales);
#endif
  return quantize_with_scales(
      x, scales_from_amax(compute_amax(x, granularity), format, power_of_two_scales), granularity,
      format);
}

Float8Tensor quantize_transposed(const Tensor& x, Granularity granularity, Format format,
                                 bool power_of_two_scales) {
#if TITAN_CUDA
  if (x.device().is_cuda()) {
    return quantize_transposed_cuda(x, granularity, format, power_of_two_scales);
  }
#endif
  return quantize(transpose_2d(x), granularity, format, power_of_two_scales);
}

Float8Tensor quantize_tensorwise_from_amax(const Tensor& x, const Tensor& amax, Format format,
                                           bool power_of_two, Float8Tensor* transposed) {
#if TITAN_CUDA
  if (x.device().is_cuda()) {
    return quantize_tensorwise_from_amax_cuda(x, amax, format, power_of_two, transposed);
  }
#endif
  Float8Tensor q = quantize_with_scales(x, scales_from_amax(amax, format, power_of_two),
                                        Granularity::Tensorwise, format);
  if (transposed != nullptr) *transposed = transpose_tensorwise(q);
  return q;
}

Tensor dequantize(const Float8Tensor& q) {
#if TITAN_CUDA
  if (q.codes.device().is_cuda()) return dequantize_cuda(q);
#endif
  const int64_t rows = q.rows(), cols = q.cols();
  Tensor out = Tensor::empty({rows, cols}, DType::F32);
  const auto* codes = static_cast<const uint8_t*>(q.codes.raw_data());
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      out.data<float>()[r * cols + c] = decode(codes[r * cols + c], q.format) / q.scale_at(r, c);
    }
  }
  return out;
}

Tensor transpose_2d(const Tensor& x) {
#if TITAN_CUDA
  if (x.device().is_cuda()) return transpose_2d_cuda(x);
#endif
  require_2d_f32(x, "transpose_2d");
  const int64_t rows = x.size(0), cols = x.size(1);
  Tensor t = Tensor::empty({cols, rows}, DType::F32);
  const float* in = x.data<float>();
  float* out = t.data<float>();
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) out[c * rows + r] = in[r * cols + c];
  }
  return t;
}

Float8Tensor transpose_tensorwise(const Float8Tensor& q) {
  TT_CHECK(q.granularity == Granularity::Tensorwise, "transpose of a ",
           granularity_name(q.granularity), " Float8Tensor: re-quantize from high precision");
#if TITAN_CUDA
  if (q.codes.device().is_cuda()) return transpose_tensorwise_cuda(q);
#endif
  const int64_t rows = q.rows(), cols = q.cols();
  Float8Tensor t = q;
  t.codes = Tensor::empty({cols, rows}, q.codes.dtype());
  const auto* in = static_cast<const uint8_t*>(q.codes.raw_data());
  auto* out = static_cast<uint8_t*>(t.codes.raw_data());
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) out[c * rows + r] = in[r * cols + c];
  }
  return t;
}

}  // namespace titan::fp8
