// CUDA twin of model/ops/rmsnorm.h.
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
//
// dweight is a column sum over rows, a different reduction shape, so it is its own kernel: a
// warp spans 32 columns (coalesced), the warps of a block and a grid dimension split the rows,
// and when the grid splits the rows each split writes an f32 partial that a last kernel adds to
// dweight in a fixed order. No atomics: the gradient is the same bits on every run.
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <limits>

#include "core/cuda/launch.cuh"
#include "core/cuda/pack.cuh"
#include "model/ops/rmsnorm.h"

namespace titan::model {

namespace {

struct RmsNormConfig {
  static constexpr int kMaxRowThreads = 512;  // row kernels: a block per row
  static constexpr int kColumns = 32;         // dweight: columns per block (one warp wide)
  static constexpr int kRowGroups = 16;      // dweight: warps per block, each taking every 16th row
  static constexpr int kTargetBlocks = 528;  // dweight: ~4 blocks per H100 SM
  static constexpr int kMinRowsPerThread = 4;  // dweight: a split is not worth fewer
};

using cuda::aligned16;
using cuda::load_pack;
using cuda::Pack;
using cuda::store_pack;

// Every row starts 16-byte aligned when the base pointers are and a row is whole packs.
template <class T>
bool rows_packable(int64_t dim, std::initializer_list<const void*> pointers) {
  if (dim % Pack<T>::kSize != 0) return false;
  return std::all_of(pointers.begin(), pointers.end(), aligned16);
}

// Enough threads for one element or pack each, in whole warps, at most kMaxRowThreads.
int row_threads(int64_t units) {
  int64_t warps = (units + 31) / 32;
  return static_cast<int>(std::clamp<int64_t>(warps * 32, 32, RmsNormConfig::kMaxRowThreads));
}

// The block's sum, returned to every thread (blockDim.x a multiple of 32). Butterfly shuffles
// leave the same bits in every lane, so all threads go on with one value.
__device__ float block_sum(float v) {
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
template <class T, bool kPacked, bool kAdd>
__global__ void rmsnorm_forward_kernel(T* y, float* rstd, T* x, const T* residual, const T* weight,
                                       int64_t dim, float eps) {
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
      }
      store_pack(yr + k, yp);
    } else {
      yr[k] = cuda::store_as<T>(cuda::load_f32(xr[k]) * r * cuda::load_f32(weight[k]));
    }
  });
}

// With x̂ = x·r and g = dy ⊙ weight:  dx = r · (g − x̂ · mean(g ⊙ x̂)). Block t = row t.
// With kAdd, dx (rounded to T) + dresidual is what is stored.
template <class T, bool kPacked, bool kAdd>
__global__ void rmsnorm_backward_dx_kernel(T* dx, const T* dy, const T* x, const T* weight,
                                           const float* rstd, const T* dresidual, int64_t dim) {
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
      store_pack(dxr + k, dxp);
    } else {
      T v = dx_of(cuda::load_f32(xr[k]), cuda::load_f32(dyr[k]), cuda::load_f32(weight[k]));
      if constexpr (kAdd) v = plus(v, dresidual[t * dim + k]);
      dxr[k] = v;
    }
  });
}

// Σ over this block's rows of dy ⊙ x̂ for 32 columns. blockDim = (kColumns, kRowGroups);
// blockIdx.y picks a split of the rows. With one split the sum goes straight into dweight,
// otherwise into partials[blockIdx.y, :].
template <class T>
__global__ void rmsnorm_dweight_kernel(float* dweight, float* partials, const T* dy, const T* x,
                                       const float* rstd, int64_t rows, int64_t dim) {
  constexpr int kColumns = RmsNormConfig::kColumns, kRowGroups = RmsNormConfig::kRowGroups;
  __shared__ float group_sums[kRowGroups][kColumns + 1];  // +1: no bank conflicts
  const int64_t d = blockIdx.x * int64_t{kColumns} + threadIdx.x;
  float sum = 0;
  if (d < dim) {
    const int64_t stride = int64_t{kRowGroups} * gridDim.y;
    for (int64_t t = blockIdx.y * int64_t{kRowGroups} + threadIdx.y; t < rows; t += stride) {
      sum += cuda::load_f32(dy[t * dim + d]) * (cuda::load_f32(x[t * dim + d]) * rstd[t]);
    }
  }
  group_sums[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.y != 0 || d >= dim) return;
  sum = 0;
#pragma unroll
  for (int g = 0; g < kRowGroups; ++g) sum += group_sums[g][threadIdx.x];
  if (gridDim.y == 1) {
    dweight[d] += sum;
  } else {
    partials[blockIdx.y * dim + d] = sum;
  }
}

// dweight[d] += Σ_s partials[s, d], in order of s.
__global__ void rmsnorm_dweight_finish_kernel(float* dweight, const float* partials, int splits,
                                              int64_t dim) {
  for (int64_t d = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; d < dim;
       d += int64_t{gridDim.x} * blockDim.x) {
    float sum = 0;
    for (int s = 0; s < splits; ++s) sum += partials[s * dim + d];
    dweight[d] += sum;
  }
}

void rmsnorm_dweight(const Tensor& dweight, const Tensor& dy, const Tensor& x, const Tensor& rstd,
                     int64_t rows, int64_t dim) {
  using Config = RmsNormConfig;
  const int64_t column_blocks = (dim + Config::kColumns - 1) / Config::kColumns;
  const int64_t max_splits =
      std::max<int64_t>(1, rows / (int64_t{Config::kRowGroups} * Config::kMinRowsPerThread));
  const int64_t splits = std::clamp<int64_t>(Config::kTargetBlocks / column_blocks, 1,
                                             std::min<int64_t>(max_splits, 65535));
  Tensor partials;
  if (splits > 1) partials = Tensor::empty({splits, dim}, DType::F32, dweight.device());
  float* partials_ptr = splits > 1 ? cuda::device_ptr<float>(partials) : nullptr;
  float* dweight_ptr = cuda::device_ptr<float>(dweight);
  const dim3 grid(static_cast<unsigned>(column_blocks), static_cast<unsigned>(splits));
  const dim3 block(Config::kColumns, Config::kRowGroups);
  cuda::visit_cuda_floating(x.dtype(), "rmsnorm_backward", [&]<class T>() {
    rmsnorm_dweight_kernel<T><<<grid, block, 0, cuda::current_stream()>>>(
        dweight_ptr, partials_ptr, cuda::device_ptr<T>(dy), cuda::device_ptr<T>(x),
        cuda::device_ptr<float>(rstd), rows, dim);
    cuda::launch_check();
  });
  if (splits > 1) {
    constexpr int kThreads = 256;
    rmsnorm_dweight_finish_kernel<<<cuda::grid_for(dim, kThreads), kThreads, 0,
                                    cuda::current_stream()>>>(dweight_ptr, partials_ptr,
                                                              static_cast<int>(splits), dim);
    cuda::launch_check();
  }
}

// The row kernels of forward, with or without the residual add (residual null).
void launch_rmsnorm_forward(const Tensor& y, const Tensor& rstd, const Tensor& x,
                            const Tensor* residual, const Tensor& weight, double eps) {
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
    auto launch = [&]<bool kPacked, bool kAdd>() {
      rmsnorm_forward_kernel<T, kPacked, kAdd><<<blocks, threads, 0, stream>>>(
          y_ptr, rstd_ptr, x_ptr, r_ptr, w_ptr, dim, static_cast<float>(eps));
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

// dx's row kernels, with or without the residual's gradient (dresidual null), then dweight.
void launch_rmsnorm_backward(const Tensor& dx, const Tensor& dweight, const Tensor& dy,
                             const Tensor& x, const Tensor& weight, const Tensor& rstd,
                             const Tensor* dresidual) {
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
    auto launch = [&]<bool kPacked, bool kAdd>() {
      rmsnorm_backward_dx_kernel<T, kPacked, kAdd>
          <<<blocks, threads, 0, stream>>>(dx_ptr, dy_ptr, x_ptr, w_ptr, rstd_ptr, d_ptr, dim);
    };
    if (packed) {
      d_ptr ? launch.template operator()<true, true>() : launch.template operator()<true, false>();
    } else {
      d_ptr ? launch.template operator()<false, true>()
            : launch.template operator()<false, false>();
    }
    cuda::launch_check();
  });
  rmsnorm_dweight(dweight, dy, x, rstd, rows, dim);
}

}  // namespace

void rmsnorm_forward_cuda(const Tensor& y, const Tensor& rstd, const Tensor& x,
                          const Tensor& weight, double eps) {
  launch_rmsnorm_forward(y, rstd, x, nullptr, weight, eps);
}

void add_rmsnorm_forward_cuda(const Tensor& y, const Tensor& rstd, const Tensor& h,
                              const Tensor& residual, const Tensor& weight, double eps) {
  launch_rmsnorm_forward(y, rstd, h, &residual, weight, eps);
}

void rmsnorm_backward_cuda(const Tensor& dx, const Tensor& dweight, const Tensor& dy,
                           const Tensor& x, const Tensor& weight, const Tensor& rstd) {
  launch_rmsnorm_backward(dx, dweight, dy, x, weight, rstd, nullptr);
}

void rmsnorm_backward_add_cuda(const Tensor& dx, const Tensor& dweight, const Tensor& dy,
                               const Tensor& x, const Tensor& weight, const Tensor& rstd,
                               const Tensor& dresidual) {
  launch_rmsnorm_backward(dx, dweight, dy, x, weight, rstd, &dresidual);
}

}  // namespace titan::model
