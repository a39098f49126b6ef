// Helpers for the project's CUDA kernels (.cu only).
//
//   launch_check()          throws an Error if the last launch failed
//   grid_for(n, threads)    blocks to cover n items, capped for grid-stride loops
//   load_f32 / store_as<T>  element access for float and bf16 storage: every kernel computes
//                           in fp32 and only rounds when it stores (as the CPU twins do)
//   visit_cuda_floating     runtime DType -> float or __nv_bfloat16 template argument
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "core/cuda/cuda_check.h"
#include "core/cuda/stream.h"
#include "core/dtype.h"
#include "core/tensor.h"

namespace titan::cuda {

inline void launch_check() { TT_CUDA_CHECK(cudaGetLastError()); }

// ⌈a / b⌉ for a ≥ 0 and b > 0: how many blocks or tiles cover a elements.
inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

inline unsigned grid_for(int64_t n, int threads, int64_t max_blocks = 65535LL * 16) {
  int64_t blocks = ceil_div(n, threads);
  return static_cast<unsigned>(std::clamp<int64_t>(blocks, 1, max_blocks));
}

__device__ __forceinline__ float load_f32(float v) { return v; }
__device__ __forceinline__ float load_f32(__nv_bfloat16 v) { return __bfloat162float(v); }

template <class T>
__device__ __forceinline__ T store_as(float v);
template <>
__device__ __forceinline__ float store_as<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __nv_bfloat16 store_as<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

// float for F32, __nv_bfloat16 for BF16 (same bits as titan::bf16_t).
template <class F>
decltype(auto) visit_cuda_floating(DType dtype, const char* op, F&& f) {
  switch (dtype) {
    case DType::F32: return f.template operator()<float>();
    case DType::BF16: return f.template operator()<__nv_bfloat16>();
    default: break;
  }
  TT_CHECK(false, op, ": the CUDA path takes f32 or bf16, got ", dtype_name(dtype));
}

template <class T>
constexpr DType cuda_dtype_of() {
  if constexpr (std::is_same_v<T, __nv_bfloat16>)
    return DType::BF16;
  else
    return dtype_of<T>();
}

// A CUDA tensor's data as element type T (float, __nv_bfloat16, int32_t, uint8_t, …), checked
// to live on the current device: a kernel launched on cuda:0 cannot read cuda:1's memory.
template <class T>
T* device_ptr(const Tensor& t) {
  TT_CHECK(t.device().is_cuda(), "a kernel was handed a ", t.device(), " tensor ", t);
  TT_CHECK(t.device().index == current_device(), "a kernel on cuda:", current_device(),
           " was handed a tensor on ", t.device(), "; make that device current first");
  TT_CHECK(t.dtype() == cuda_dtype_of<T>(), "a kernel read ", t, " as ",
           dtype_name(cuda_dtype_of<T>()));
  return static_cast<T*>(t.raw_data());
}

}  // namespace titan::cuda
