// fill_ and dtype casts of CUDA tensors: core/cuda/backend.h's fill and cast.
#include <cuda_bf16.h>

#include "core/cuda/backend.h"
#include "core/cuda/launch.cuh"

namespace titan::cuda_backend {

namespace {

template <class T>
__global__ void fill_kernel(T* out, int64_t n, T value) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    out[i] = value;
  }
}

// Through double, so that f64 and i32 values survive; f32 -> bf16 rounds once (RNE), as the
// CPU cast does.
__device__ __forceinline__ double to_double(float v) { return v; }
__device__ __forceinline__ double to_double(double v) { return v; }
__device__ __forceinline__ double to_double(int32_t v) { return v; }
__device__ __forceinline__ double to_double(__nv_bfloat16 v) { return __bfloat162float(v); }

template <class T>
__device__ __forceinline__ T from_double(double v) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) return __float2bfloat16_rn(static_cast<float>(v));
  else return static_cast<T>(v);
}

template <class In, class Out>
__global__ void cast_kernel(Out* out, const In* in, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    out[i] = from_double<Out>(to_double(in[i]));
  }
}

template <class T>
void launch_fill(const Tensor& t, T value) {
  constexpr int kThreads = 256;
  fill_kernel<<<cuda::grid_for(t.numel(), kThreads), kThreads, 0, cuda::current_stream()>>>(
      static_cast<T*>(t.raw_data()), t.numel(), value);
  cuda::launch_check();
}

// Calls f with a null pointer of the CUDA element type of `dtype`.
template <class F>
void visit_castable(DType dtype, const char* what, F&& f) {
  switch (dtype) {
    case DType::F32: f(static_cast<float*>(nullptr)); return;
    case DType::F64: f(static_cast<double*>(nullptr)); return;
    case DType::BF16: f(static_cast<__nv_bfloat16*>(nullptr)); return;
    case DType::I32: f(static_cast<int32_t*>(nullptr)); return;
    default: TT_CHECK(false, "cast ", what, " ", dtype_name(dtype), " is not supported on CUDA");
  }
}

}  // namespace

void fill(const Tensor& t, double value) {
  TT_CHECK(t.is_contiguous(), "fill_ of a non-contiguous tensor ", t);
  if (t.numel() == 0) return;
  switch (t.dtype()) {
    case DType::F32: launch_fill(t, static_cast<float>(value)); break;
    case DType::BF16: launch_fill(t, __float2bfloat16_rn(static_cast<float>(value))); break;
    case DType::I32: launch_fill(t, static_cast<int32_t>(value)); break;
    case DType::I64: launch_fill(t, static_cast<int64_t>(value)); break;
    case DType::U8: launch_fill(t, static_cast<uint8_t>(value)); break;
    default: TT_CHECK(false, "fill_ of a ", dtype_name(t.dtype()), " CUDA tensor is not supported");
  }
}

void cast(const Tensor& dst, const Tensor& src) {
  TT_CHECK(dst.is_contiguous() && src.is_contiguous() && dst.numel() == src.numel(),
           "cast: ", src, " into ", dst);
  if (dst.numel() == 0) return;
  visit_castable(src.dtype(), "from", [&](auto* in_tag) {
    visit_castable(dst.dtype(), "to", [&](auto* out_tag) {
      using In = std::remove_pointer_t<decltype(in_tag)>;
      using Out = std::remove_pointer_t<decltype(out_tag)>;
      constexpr int kThreads = 256;
      cast_kernel<<<cuda::grid_for(src.numel(), kThreads), kThreads, 0, cuda::current_stream()>>>(
          static_cast<Out*>(dst.raw_data()), static_cast<const In*>(src.raw_data()), src.numel());
      cuda::launch_check();
    });
  });
}

}  // namespace titan::cuda_backend
