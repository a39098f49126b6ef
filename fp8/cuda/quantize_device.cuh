// The element arithmetic of FP8 quantization on the device, shared by fp8/cuda/quantize.cu and
// the producers that quantize their own output (fp8/cuda/producer_quantize.cu): one source for
// the scale and the code of a value, so that every kernel gives float8_tensor.cpp's bits
// (see quantize.cu for why they are the CPU's).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "core/cuda/launch.cuh"
#include "fp8/float8_tensor.h"

namespace titan::fp8::device {

template <Format F>
__device__ __forceinline__ uint8_t encode_fp8(float v) {
  return __nv_cvt_float_to_fp8(v, __NV_SATFINITE, F == Format::E4M3 ? __NV_E4M3 : __NV_E5M2);
}

template <Format F>
__device__ __forceinline__ float decode_fp8(uint8_t code) {
  return __half2float(
      __half(__nv_cvt_fp8_to_halfraw(code, F == Format::E4M3 ? __NV_E4M3 : __NV_E5M2)));
}

template <Format F>
__device__ __forceinline__ constexpr float fp8_max() {
  return F == Format::E4M3 ? 448.0f : 57344.0f;
}

// float8_tensor.cpp's scales_from_amax, operation for operation: std::max(amax, eps) is
// (amax < eps ? eps : amax), and the power of two keeps the exponent bits only.
template <Format F>
__device__ __forceinline__ float scale_from_amax(float amax, bool power_of_two) {
  float scale = __fdiv_rn(fp8_max<F>(), amax < kAmaxEps ? kAmaxEps : amax);
  if (power_of_two) scale = __uint_as_float(__float_as_uint(scale) & 0xFF800000u);
  return scale;
}

__device__ __forceinline__ float warp_max(float v) {
  for (int offset = 16; offset > 0; offset >>= 1) {
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  }
  return v;
}

// The max over a CTA of kWarps warps; every thread gets it. `scratch` holds kWarps floats.
template <int kWarps>
__device__ __forceinline__ float block_max(float v, float* scratch) {
  v = warp_max(v);
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float m = scratch[0];
#pragma unroll
  for (int w = 1; w < kWarps; ++w) m = fmaxf(m, scratch[w]);
  return m;
}

__device__ __forceinline__ void load4(const float* p, float v[4]) {
  float4 q = __ldg(reinterpret_cast<const float4*>(p));
  v[0] = q.x, v[1] = q.y, v[2] = q.z, v[3] = q.w;
}
__device__ __forceinline__ void load4(const __nv_bfloat16* p, float v[4]) {
  uint2 q = __ldg(reinterpret_cast<const uint2*>(p));
  float2 lo = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&q.x));
  float2 hi = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&q.y));
  v[0] = lo.x, v[1] = lo.y, v[2] = hi.x, v[3] = hi.y;
}

// v = row[c, c + 4) as f32, 0 past `cols` (0 never raises an amax). kVec: 4-element groups are
// aligned (cols % 4 == 0 and an aligned base), so a group is wholly inside or wholly outside.
template <bool kVec, class T>
__device__ __forceinline__ void load_group(const T* row, int64_t c, int64_t cols, float v[4]) {
  if constexpr (kVec) {
    if (c < cols) {
      load4(row + c, v);
    } else {
      v[0] = v[1] = v[2] = v[3] = 0.0f;
    }
  } else {
#pragma unroll
    for (int j = 0; j < 4; ++j) v[j] = c + j < cols ? cuda::load_f32(row[c + j]) : 0.0f;
  }
}

__device__ __forceinline__ uint32_t pack4(const uint8_t q[4]) {
  return uint32_t{q[0]} | uint32_t{q[1]} << 8 | uint32_t{q[2]} << 16 | uint32_t{q[3]} << 24;
}

template <bool kVec>
__device__ __forceinline__ void store_group(uint8_t* row, int64_t c, int64_t cols,
                                            const uint8_t q[4]) {
  if constexpr (kVec) {
    if (c < cols) *reinterpret_cast<uint32_t*>(row + c) = pack4(q);
  } else {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      if (c + j < cols) row[c + j] = q[j];
    }
  }
}

template <Format F>
__device__ __forceinline__ void encode_group(const float v[4], float scale, uint8_t q[4]) {
#pragma unroll
  for (int j = 0; j < 4; ++j) q[j] = encode_fp8<F>(v[j] * scale);
}

__device__ __forceinline__ float abs_max4(float m, const float v[4]) {
  return fmaxf(fmaxf(m, fmaxf(fabsf(v[0]), fabsf(v[1]))), fmaxf(fabsf(v[2]), fabsf(v[3])));
}

// Host side: the format as a template argument of f.
template <class F>
decltype(auto) visit_format(Format format, F&& f) {
  if (format == Format::E4M3) return f.template operator()<Format::E4M3>();
  return f.template operator()<Format::E5M2>();
}

}  // namespace titan::fp8::device
