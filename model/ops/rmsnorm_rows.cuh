// RMSNorm's row kernels (model/ops/rmsnorm.cu), in a header so that a kernel quantizing the
// norm's output for an FP8 GEMM (fp8/cuda/producer_quantize.cu) runs the same arithmetic, with
// the same threads and the same order of sums, and so gives the same bits as the norm alone.
// A kernel ends each row with an epilogue (row_epilogue.cuh): nothing for the norm itself, the
// quantization of the row for the fused one.
//
// Forward and the dx part of backward run one block per row: a first pass reduces the row
// (Σx², or Σ g·x̂) with warp shuffles, a second pass re-reads the row (now in L1/L2) and writes
// it. Rows move 16 bytes per load when the row length and the pointers allow it.
//
// The residual add fuses into those row kernels (kAdd): forward's first pass adds the residual
// and stores the sum before squaring it, backward's second pass adds the residual's gradient
// to dx before storing it. Each rounds where accumulate and the plain kernel round (the sum to
// T before it is squared, dx to T before the add), so a fused kernel gives the bits of the two
// it replaces, with one read and write of the row fewer and one launch fewer.
#pragma once

#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <limits>

#include "core/cuda/launch.cuh"
#include "core/cuda/pack.cuh"
#include "core/tensor.h"
#include "model/ops/row_epilogue.cuh"

namespace titan::model::rmsnorm_rows {

using cuda::aligned16;
using cuda::load_pack;
using cuda::Pack;
using cuda::store_pack;

// Every row starts 16-byte aligned when the base pointers are and a row is whole packs.
template <class T>
inline bool rows_packable(int64_t dim, std::initializer_list<const void*> pointers) {
  if (dim % Pack<T>::kSize != 0) return false;
  return std::all_of(pointers.begin(), pointers.end(), aligned16);
}

// The block's sum, returned to every thread (blockDim.x a multiple of 32). Butterfly shuffles
// leave the same bits in every lane, so all threads go on with one value.
__device__ __forceinline__ float block_sum(float v) {
  __shared__ float warp_sums[32];
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) warp_sums[warp] = v;
  __syncthreads();
  v = lane < static_cast<int>(blockDim.x / 32) ? warp_sums[lane] : 0.f;
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// Calls f(k) for the offsets k of this thread's share of a row: every kSize-th element when
// kPacked (f handles a pack), else single elements. The same thread gets the same offsets on
// every call, so a second pass may overwrite what the first read.
template <class T, bool kPacked, class F>
__device__ __forceinline__ void for_row(int64_t dim, F&& f) {
  constexpr int kSize = kPacked ? Pack<T>::kSize : 1;
  for (int64_t p = threadIdx.x; p < dim / kSize; p += blockDim.x) f(p * kSize);
}

// y[t] = x[t]·rstd[t]⊙weight, rstd[t] = 1/sqrt(mean(x[t]²) + eps). Block t = row t. With
// kAdd, x[t] += residual[t] first (stored, rounded to T), and the norm is of that sum.
template <class T, bool kPacked, bool kAdd, class Epilogue>
__global__ void rmsnorm_forward_kernel(T* y, float* rstd, T* x, const T* residual, const T* weight,
                                       int64_t dim, float eps, Epilogue epilogue) {
  constexpr int kSize = kPacked ? Pack<T>::kSize : 1;
  const int64_t t = blockIdx.x;
  T* xr = x + t * dim;
  T* yr = y + t * dim;

  float sum_sq = 0;
  for_row<T, kPacked>(dim, [&](int64_t k) {
    if constexpr (kPacked) {
      Pack<T> xp = load_pack(xr + k);
      if constexpr (kAdd) {
        const Pack<T> rp = load_pack(residual + t * dim + k);
#pragma unroll
        for (int i = 0; i < kSize; ++i) {
          xp.v[i] = cuda::store_as<T>(cuda::load_f32(xp.v[i]) + cuda::load_f32(rp.v[i]));
        }
        store_pack(xr + k, xp);
      }
#pragma unroll
      for (int i = 0; i < kSize; ++i) {
        const float v = cuda::load_f32(xp.v[i]);
        sum_sq += v * v;
      }
    } else {
      if constexpr (kAdd) {
        xr[k] = cuda::store_as<T>(cuda::load_f32(xr[k]) + cuda::load_f32(residual[t * dim + k]));
      }
      const float v = cuda::load_f32(xr[k]);
      sum_sq += v * v;
    }
  });
  sum_sq = block_sum(sum_sq);
  const float r = 1.0f / sqrtf(sum_sq / static_cast<float>(dim) + eps);
  if (threadIdx.x == 0) rstd[t] = r;

  for_row<T, kPacked>(dim, [&](int64_t k) {
    if constexpr (kPacked) {
      const Pack<T> xp = load_pack(xr + k), wp = load_pack(weight + k);
      Pack<T> yp;
#pragma unroll
      for (int i = 0; i < kSize; ++i) {
        yp.v[i] = cuda::store_as<T>(cuda::load_f32(xp.v[i]) * r * cuda::load_f32(wp.v[i]));
        epilogue.value(cuda::load_f32(yp.v[i]));
      }
      store_pack(yr + k, yp);
    } else {
      const T v = cuda::store_as<T>(cuda::load_f32(xr[k]) * r * cuda::load_f32(weight[k]));
      epilogue.value(cuda::load_f32(v));
      yr[k] = v;
    }
  });
  epilogue.row_done(t, static_cast<const T*>(yr), dim);
}

// With x̂ = x·r and g = dy ⊙ weight:  dx = r · (g − x̂ · mean(g ⊙ x̂)). Block t = row t.
// With kAdd, dx (rounded to T) + dresidual is what is stored.
template <class T, bool kPacked, bool kAdd, class Epilogue>
__global__ void rmsnorm_backward_dx_kernel(T* dx, const T* dy, const T* x, const T* weight,
                                           const float* rstd, const T* dresidual, int64_t dim,
                                           Epilogue epilogue) {
  constexpr int kSize = kPacked ? Pack<T>::kSize : 1;
  const int64_t t = blockIdx.x;
  const T* xr = x + t * dim;
  const T* dyr = dy + t * dim;
  T* dxr = dx + t * dim;
  const float r = rstd[t];

  float dot = 0;
  for_row<T, kPacked>(dim, [&](int64_t k) {
    if constexpr (kPacked) {
      const Pack<T> xp = load_pack(xr + k), dyp = load_pack(dyr + k), wp = load_pack(weight + k);
#pragma unroll
      for (int i = 0; i < kSize; ++i) {
        dot += (cuda::load_f32(dyp.v[i]) * cuda::load_f32(wp.v[i])) * (cuda::load_f32(xp.v[i]) * r);
      }
    } else {
      dot += (cuda::load_f32(dyr[k]) * cuda::load_f32(weight[k])) * (cuda::load_f32(xr[k]) * r);
    }
  });
  const float mean_dot = block_sum(dot) / static_cast<float>(dim);

  auto dx_of = [&](float xv, float dyv, float wv) {
    const float xhat = xv * r;
    return cuda::store_as<T>(r * (dyv * wv - xhat * mean_dot));
  };
  auto plus = [](T a, T b) { return cuda::store_as<T>(cuda::load_f32(a) + cuda::load_f32(b)); };
  for_row<T, kPacked>(dim, [&](int64_t k) {
    if constexpr (kPacked) {
      const Pack<T> xp = load_pack(xr + k), dyp = load_pack(dyr + k), wp = load_pack(weight + k);
      Pack<T> dxp;
#pragma unroll
      for (int i = 0; i < kSize; ++i) {
        dxp.v[i] =
            dx_of(cuda::load_f32(xp.v[i]), cuda::load_f32(dyp.v[i]), cuda::load_f32(wp.v[i]));
      }
      if constexpr (kAdd) {
        const Pack<T> dp = load_pack(dresidual + t * dim + k);
#pragma unroll
        for (int i = 0; i < kSize; ++i) dxp.v[i] = plus(dxp.v[i], dp.v[i]);
      }
#pragma unroll
      for (int i = 0; i < kSize; ++i) epilogue.value(cuda::load_f32(dxp.v[i]));
      store_pack(dxr + k, dxp);
    } else {
      T v = dx_of(cuda::load_f32(xr[k]), cuda::load_f32(dyr[k]), cuda::load_f32(weight[k]));
      if constexpr (kAdd) v = plus(v, dresidual[t * dim + k]);
      epilogue.value(cuda::load_f32(v));
      dxr[k] = v;
    }
  });
  epilogue.row_done(t, static_cast<const T*>(dxr), dim);
}

// The row kernels of forward, with or without the residual add (residual null), each block
// ending with `epilogue` (visited with the element type, so that it may depend on it).
template <class MakeEpilogue>
void launch_forward_rows(const Tensor& y, const Tensor& rstd, const Tensor& x,
                         const Tensor* residual, const Tensor& weight, double eps,
                         MakeEpilogue&& make_epilogue) {
  const int64_t rows = x.size(0), dim = x.size(1);
  if (rows == 0 || dim == 0) return;
  TT_CHECK(rows <= std::numeric_limits<int>::max(), "rmsnorm_forward: ", rows,
           " rows exceed the grid (one block per row); split the call");
  cuda::visit_cuda_floating(x.dtype(), "rmsnorm_forward", [&]<class T>() {
    T* y_ptr = cuda::device_ptr<T>(y);
    T* x_ptr = cuda::device_ptr<T>(x);
    const T* r_ptr = residual ? cuda::device_ptr<T>(*residual) : nullptr;
    const T* w_ptr = cuda::device_ptr<T>(weight);
    float* rstd_ptr = cuda::device_ptr<float>(rstd);
    const bool packed = rows_packable<T>(dim, {y_ptr, x_ptr, w_ptr, r_ptr ? r_ptr : x_ptr});
    const int threads = row_threads(packed ? dim / Pack<T>::kSize : dim);
    const unsigned blocks = static_cast<unsigned>(rows);
    cudaStream_t stream = cuda::current_stream();
    const auto epilogue = make_epilogue.template operator()<T>();
    auto launch = [&]<bool kPacked, bool kAdd>() {
      rmsnorm_forward_kernel<T, kPacked, kAdd><<<blocks, threads, 0, stream>>>(
          y_ptr, rstd_ptr, x_ptr, r_ptr, w_ptr, dim, static_cast<float>(eps), epilogue);
    };
    if (packed) {
      r_ptr ? launch.template operator()<true, true>() : launch.template operator()<true, false>();
    } else {
      r_ptr ? launch.template operator()<false, true>()
            : launch.template operator()<false, false>();
    }
    cuda::launch_check();
  });
}

// dx's row kernels, with or without the residual's gradient (dresidual null), each block
// ending with `epilogue`; dweight is the caller's (rmsnorm_dweight_cuda).
template <class MakeEpilogue>
void launch_backward_dx_rows(const Tensor& dx, const Tensor& dy, const Tensor& x,
                             const Tensor& weight, const Tensor& rstd, const Tensor* dresidual,
                             MakeEpilogue&& make_epilogue) {
  const int64_t rows = x.size(0), dim = x.size(1);
  if (rows == 0 || dim == 0) return;
  TT_CHECK(rows <= std::numeric_limits<int>::max(), "rmsnorm_backward: ", rows,
           " rows exceed the grid (one block per row); split the call");
  cuda::visit_cuda_floating(x.dtype(), "rmsnorm_backward", [&]<class T>() {
    T* dx_ptr = cuda::device_ptr<T>(dx);
    const T* dy_ptr = cuda::device_ptr<T>(dy);
    const T* x_ptr = cuda::device_ptr<T>(x);
    const T* w_ptr = cuda::device_ptr<T>(weight);
    const T* d_ptr = dresidual ? cuda::device_ptr<T>(*dresidual) : nullptr;
    const float* rstd_ptr = cuda::device_ptr<float>(rstd);
    const bool packed =
        rows_packable<T>(dim, {dx_ptr, dy_ptr, x_ptr, w_ptr, d_ptr ? d_ptr : x_ptr});
    const int threads = row_threads(packed ? dim / Pack<T>::kSize : dim);
    const unsigned blocks = static_cast<unsigned>(rows);
    cudaStream_t stream = cuda::current_stream();
    const auto epilogue = make_epilogue.template operator()<T>();
    auto launch = [&]<bool kPacked, bool kAdd>() {
      rmsnorm_backward_dx_kernel<T, kPacked, kAdd><<<blocks, threads, 0, stream>>>(
          dx_ptr, dy_ptr, x_ptr, w_ptr, rstd_ptr, d_ptr, dim, epilogue);
    };
    if (packed) {
      d_ptr ? launch.template operator()<true, true>() : launch.template operator()<true, false>();
    } else {
      d_ptr ? launch.template operator()<false, true>()
            : launch.template operator()<false, false>();
    }
    cuda::launch_check();
  });
}

// dweight [D] += Σ_t dy ⊙ x̂ (rmsnorm.cu): the column sum that backward runs after its rows.
void rmsnorm_dweight_cuda(const Tensor& dweight, const Tensor& dy, const Tensor& x,
                          const Tensor& rstd);

}  // namespace titan::model::rmsnorm_rows
