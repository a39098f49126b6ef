// CUDA twin of model/ops/cross_entropy.h.
//
// Each phase is one kernel with a block per row of logits [T, V_local]: the vocab-parallel
// all-reduces (max, then sum) run between the phases, so they cannot be fused. Threads stride
// over the row 16 bytes at a time when V_local and the pointers allow it, and reduce with warp
// shuffles. Phase 3 reads each logit and writes its gradient in the same thread, which is what
// makes dlogits == logits (in place) safe; no pointer here is __restrict__ for the same reason.
// Row statistics are f32; expf is the IEEE one (no fast-math), the row's log in double.
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <limits>

#include "core/cuda/launch.cuh"
#include "core/cuda/pack.cuh"
#include "model/ops/cross_entropy.h"

namespace titan::model {

namespace {

struct CrossEntropyConfig {
  static constexpr int kMaxThreads = 512;  // per row; a 128k-vocab f32 row is 32k packs
};

using cuda::aligned16;
using cuda::load_pack;
using cuda::Pack;
using cuda::store_pack;

struct Sum {
  __device__ float operator()(float a, float b) const { return a + b; }
};
struct Max {
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

// The block's reduction, returned to every thread (blockDim.x a multiple of 32). Butterfly
// shuffles leave the same bits in every lane. Once per kernel: warp_partials is not re-synced.
template <class Op>
__device__ float block_reduce(float v, float identity, Op op) {
  __shared__ float warp_partials[32];
  for (int offset = 16; offset > 0; offset >>= 1)
    v = op(v, __shfl_xor_sync(0xffffffffu, v, offset));
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) warp_partials[warp] = v;
  __syncthreads();
  v = lane < static_cast<int>(blockDim.x / 32) ? warp_partials[lane] : identity;
  for (int offset = 16; offset > 0; offset >>= 1)
    v = op(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

// Calls f(v, x) for each logit x = row[v] of this thread's share, reading 16 bytes at a time
// when kPacked.
template <class T, bool kPacked, class F>
__device__ __forceinline__ void for_each_logit(const T* row, int64_t vocab, F&& f) {
  if constexpr (kPacked) {
    constexpr int kSize = Pack<T>::kSize;
    for (int64_t p = threadIdx.x; p < vocab / kSize; p += blockDim.x) {
      const Pack<T> pack = load_pack(row + p * kSize);
#pragma unroll
      for (int i = 0; i < kSize; ++i) f(p * kSize + i, cuda::load_f32(pack.v[i]));
    }
  } else {
    for (int64_t v = threadIdx.x; v < vocab; v += blockDim.x) f(v, cuda::load_f32(row[v]));
  }
}

template <class T, bool kPacked>
__global__ void row_max_kernel(float* row_max, const T* logits, int64_t vocab) {
  const int64_t t = blockIdx.x;
  float m = -INFINITY;
  for_each_logit<T, kPacked>(logits + t * vocab, vocab, [&](int64_t, float x) { m = fmaxf(m, x); });
  m = block_reduce(m, -INFINITY, Max{});
  if (threadIdx.x == 0) row_max[t] = m;
}

template <class T, bool kPacked>
__global__ void row_sums_kernel(float* sum_exp, float* target_logit, const T* logits,
                                const int32_t* targets, const float* row_max, int64_t vocab,
                                int64_t vocab_start) {
  const int64_t t = blockIdx.x;
  const T* row = logits + t * vocab;
  const float m = row_max[t];
  float sum = 0;
  for_each_logit<T, kPacked>(row, vocab, [&](int64_t, float x) { sum += expf(x - m); });
  sum = block_reduce(sum, 0.0f, Sum{});
  if (threadIdx.x == 0) {
    sum_exp[t] = sum;
    const int64_t target = static_cast<int64_t>(targets[t]) - vocab_start;
    target_logit[t] = target >= 0 && target < vocab ? cuda::load_f32(row[target]) : 0.0f;
  }
}

// losses[t] = log Σ + max − target logit;  dlogits[t, v] = (softmax − onehot)·grad_scale.
template <class T, bool kPacked>
__global__ void loss_and_grad_kernel(float* losses, T* dlogits, const T* logits,
                                     const int32_t* targets, const float* row_max,
                                     const float* sum_exp, const float* target_logit, int64_t vocab,
                                     int64_t vocab_start, float grad_scale) {
  const int64_t t = blockIdx.x;
  const float m = row_max[t], sum = sum_exp[t];
  const int64_t target = static_cast<int64_t>(targets[t]) - vocab_start;  // maybe another shard's
  if (threadIdx.x == 0) {
    losses[t] = static_cast<float>(log(static_cast<double>(sum)) + m - target_logit[t]);
  }
  const float inv_sum = 1.0f / sum;
  auto grad = [&](int64_t v, float x) {
    float g = expf(x - m) * inv_sum * grad_scale;
    if (v == target) g -= grad_scale;
    return cuda::store_as<T>(g);
  };
  const T* row = logits + t * vocab;
  T* drow = dlogits + t * vocab;
  if constexpr (kPacked) {
    constexpr int kSize = Pack<T>::kSize;
    for (int64_t p = threadIdx.x; p < vocab / kSize; p += blockDim.x) {
      const Pack<T> in = load_pack(row + p * kSize);
      Pack<T> out;
#pragma unroll
      for (int i = 0; i < kSize; ++i) out.v[i] = grad(p * kSize + i, cuda::load_f32(in.v[i]));
      store_pack(drow + p * kSize, out);
    }
  } else {
    for (int64_t v = threadIdx.x; v < vocab; v += blockDim.x) {
      drow[v] = grad(v, cuda::load_f32(row[v]));
    }
  }
}

// Block size and whether rows go 16 bytes at a time, for rows of `vocab` T's.
struct RowLaunch {
  bool packed;
  int threads;
};

template <class T>
RowLaunch row_launch(int64_t vocab, std::initializer_list<const void*> pointers) {
  const bool packed =
      vocab % Pack<T>::kSize == 0 && std::all_of(pointers.begin(), pointers.end(), aligned16);
  const int64_t units = packed ? vocab / Pack<T>::kSize : vocab;
  const int threads = static_cast<int>(
      std::clamp<int64_t>((units + 31) / 32 * 32, 32, CrossEntropyConfig::kMaxThreads));
  return {packed, threads};
}

// Rows of logits, checked to fit the grid (a block per row).
unsigned row_blocks(const char* op, const Tensor& logits) {
  TT_CHECK(logits.size(0) <= std::numeric_limits<int>::max(), op, ": ", logits.size(0),
           " rows exceed the grid (one block per row); split the call");
  return static_cast<unsigned>(logits.size(0));
}

// One block a row: a row no loss reaches gets a zero loss and a zero gradient.
template <class T>
__global__ void zero_untrained_kernel(float* losses, T* dlogits, const uint8_t* trained,
                                      int64_t vocab) {
  const int64_t row = blockIdx.x;
  if (trained[row] != 0) return;
  if (threadIdx.x == 0) losses[row] = 0.0f;
  T* dx = dlogits + row * vocab;
  for (int64_t v = threadIdx.x; v < vocab; v += blockDim.x) dx[v] = T(0.0f);
}

}  // namespace

void cross_entropy_row_max_cuda(const Tensor& row_max, const Tensor& logits) {
  const int64_t vocab = logits.size(1);
  if (logits.size(0) == 0) return;
  TT_CHECK(vocab > 0, "cross_entropy_row_max: logits ", logits, " have no vocabulary");
  const unsigned blocks = row_blocks("cross_entropy_row_max", logits);
  cuda::visit_cuda_floating(logits.dtype(), "cross_entropy_row_max", [&]<class T>() {
    const T* x = cuda::device_ptr<T>(logits);
    float* m = cuda::device_ptr<float>(row_max);
    const RowLaunch launch = row_launch<T>(vocab, {x});
    cudaStream_t stream = cuda::current_stream();
    if (launch.packed) {
      row_max_kernel<T, true><<<blocks, launch.threads, 0, stream>>>(m, x, vocab);
    } else {
      row_max_kernel<T, false><<<blocks, launch.threads, 0, stream>>>(m, x, vocab);
    }
    cuda::launch_check();
  });
}

void cross_entropy_row_sums_cuda(const Tensor& sum_exp, const Tensor& target_logit,
                                 const Tensor& logits, const Tensor& targets, const Tensor& row_max,
                                 int64_t vocab_start) {
  const int64_t vocab = logits.size(1);
  if (logits.size(0) == 0) return;
  const unsigned blocks = row_blocks("cross_entropy_row_sums", logits);
  cuda::visit_cuda_floating(logits.dtype(), "cross_entropy_row_sums", [&]<class T>() {
    const T* x = cuda::device_ptr<T>(logits);
    const RowLaunch launch = row_launch<T>(vocab, {x});
    auto run = [&]<bool kPacked>() {
      row_sums_kernel<T, kPacked><<<blocks, launch.threads, 0, cuda::current_stream()>>>(
          cuda::device_ptr<float>(sum_exp), cuda::device_ptr<float>(target_logit), x,
          cuda::device_ptr<int32_t>(targets), cuda::device_ptr<float>(row_max), vocab, vocab_start);
    };
    if (launch.packed) {
      run.template operator()<true>();
    } else {
      run.template operator()<false>();
    }
    cuda::launch_check();
  });
}

void cross_entropy_loss_and_grad_cuda(const Tensor& losses, const Tensor& dlogits,
                                      const Tensor& logits, const Tensor& targets,
                                      const Tensor& row_max, const Tensor& sum_exp,
                                      const Tensor& target_logit, int64_t vocab_start,
                                      double grad_scale) {
  const int64_t vocab = logits.size(1);
  if (logits.size(0) == 0) return;
  const unsigned blocks = row_blocks("cross_entropy_loss_and_grad", logits);
  cuda::visit_cuda_floating(logits.dtype(), "cross_entropy_loss_and_grad", [&]<class T>() {
    const T* x = cuda::device_ptr<T>(logits);
    T* dx = cuda::device_ptr<T>(dlogits);
    const RowLaunch launch = row_launch<T>(vocab, {x, dx});
    auto run = [&]<bool kPacked>() {
      loss_and_grad_kernel<T, kPacked><<<blocks, launch.threads, 0, cuda::current_stream()>>>(
          cuda::device_ptr<float>(losses), dx, x, cuda::device_ptr<int32_t>(targets),
          cuda::device_ptr<float>(row_max), cuda::device_ptr<float>(sum_exp),
          cuda::device_ptr<float>(target_logit), vocab, vocab_start,
          static_cast<float>(grad_scale));
    };
    if (launch.packed) {
      run.template operator()<true>();
    } else {
      run.template operator()<false>();
    }
    cuda::launch_check();
  });
}

void cross_entropy_zero_untrained_cuda(const Tensor& losses, const Tensor& dlogits,
                                       const Tensor& trained) {
  const int64_t vocab = dlogits.size(1);
  if (dlogits.size(0) == 0) return;
  const unsigned blocks = row_blocks("cross_entropy_zero_untrained", dlogits);
  cuda::visit_cuda_floating(dlogits.dtype(), "cross_entropy_zero_untrained", [&]<class T>() {
    zero_untrained_kernel<T><<<blocks, 256, 0, cuda::current_stream()>>>(
        cuda::device_ptr<float>(losses), cuda::device_ptr<T>(dlogits),
        cuda::device_ptr<uint8_t>(trained), vocab);
    cuda::launch_check();
  });
}

}  // namespace titan::model
