// CUDA twins of model/ops/tensor_math.h.
//
// accumulate and scale_inplace are grid-stride element-wise loops that move 16 bytes per load
// when every pointer is 16-byte aligned (a view may start anywhere), with a scalar tail.
//
// sum_of_squares is the gradient-norm reduction, so it is deterministic: a fixed number of
// blocks (not one per SM of whatever GPU runs it) each write one partial, and a second kernel
// adds the partials in a fixed order. Each thread accumulates its squares in double: on
// H100/A100 an fp64 FMA per element is far below the memory bound (~4 elements/clock/SM), and
// the result then matches the CPU's double sum to ~1e-15 instead of fp32's ~1e-6.
#include <cuda_bf16.h>

#include <cstdint>
#include <vector>

#include "core/cuda/launch.cuh"
#include "core/cuda/pack.cuh"
#include "model/ops/tensor_math.h"

namespace titan::model {

namespace {

struct TensorMathConfig {
  static constexpr int kThreads = 256;
  static constexpr int kSumBlocks = 1024;  // partials of sum_of_squares; also its final block size
};

using cuda::aligned16;
using cuda::load_pack;
using cuda::Pack;
using cuda::store_pack;

__device__ __forceinline__ int64_t global_thread() {
  return blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
}
__device__ __forceinline__ int64_t grid_threads() { return int64_t{gridDim.x} * blockDim.x; }

// acc[n] += x[n]. With `packed`, elements [0, n - n % kSize) go 16 bytes at a time.
template <class T>
__global__ void accumulate_kernel(T* acc, const T* x, int64_t n, bool packed) {
  constexpr int kSize = Pack<T>::kSize;
  const int64_t packs = packed ? n / kSize : 0;
  for (int64_t i = global_thread(); i < packs; i += grid_threads()) {
    Pack<T> a = load_pack(acc + i * kSize);
    const Pack<T> b = load_pack(x + i * kSize);
#pragma unroll
    for (int k = 0; k < kSize; ++k) {
      a.v[k] = cuda::store_as<T>(cuda::load_f32(a.v[k]) + cuda::load_f32(b.v[k]));
    }
    store_pack(acc + i * kSize, a);
  }
  for (int64_t i = packs * kSize + global_thread(); i < n; i += grid_threads()) {
    acc[i] = cuda::store_as<T>(cuda::load_f32(acc[i]) + cuda::load_f32(x[i]));
  }
}

template <class T>
__global__ void scale_kernel(T* t, int64_t n, float factor, bool packed) {
  constexpr int kSize = Pack<T>::kSize;
  const int64_t packs = packed ? n / kSize : 0;
  for (int64_t i = global_thread(); i < packs; i += grid_threads()) {
    Pack<T> a = load_pack(t + i * kSize);
#pragma unroll
    for (int k = 0; k < kSize; ++k) a.v[k] = cuda::store_as<T>(cuda::load_f32(a.v[k]) * factor);
    store_pack(t + i * kSize, a);
  }
  for (int64_t i = packs * kSize + global_thread(); i < n; i += grid_threads()) {
    t[i] = cuda::store_as<T>(cuda::load_f32(t[i]) * factor);
  }
}

// The block's sum for thread 0 (blockDim.x a multiple of 32, at most 1024).
__device__ double block_sum_to_thread0(double v) {
  __shared__ double warp_sums[32];
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_down_sync(0xffffffffu, v, offset);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) warp_sums[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < static_cast<int>(blockDim.x / 32) ? warp_sums[lane] : 0.0;
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_down_sync(0xffffffffu, v, offset);
  }
  return v;
}

// partials[blockIdx.x] = Σ x² over this block's grid-stride share.
template <class T>
__global__ void sum_of_squares_partials_kernel(double* partials, const T* x, int64_t n,
                                               bool packed) {
  constexpr int kSize = Pack<T>::kSize;
  const int64_t packs = packed ? n / kSize : 0;
  double sum = 0;
  for (int64_t i = global_thread(); i < packs; i += grid_threads()) {
    const Pack<T> a = load_pack(x + i * kSize);
#pragma unroll
    for (int k = 0; k < kSize; ++k) {
      const double v = cuda::load_f32(a.v[k]);
      sum = fma(v, v, sum);
    }
  }
  for (int64_t i = packs * kSize + global_thread(); i < n; i += grid_threads()) {
    const double v = cuda::load_f32(x[i]);
    sum = fma(v, v, sum);
  }
  sum = block_sum_to_thread0(sum);
  if (threadIdx.x == 0) partials[blockIdx.x] = sum;
}

// One block of kSumBlocks threads: result[0] = Σ partials[0, count).
__global__ void sum_partials_kernel(double* result, const double* partials, int count) {
  double v = static_cast<int>(threadIdx.x) < count ? partials[threadIdx.x] : 0.0;
  v = block_sum_to_thread0(v);
  if (threadIdx.x == 0) result[0] = v;
}

}  // namespace

void accumulate_cuda(const Tensor& acc, const Tensor& x) {
  const int64_t n = acc.numel();
  if (n == 0) return;
  cuda::visit_cuda_floating(acc.dtype(), "accumulate", [&]<class T>() {
    T* a = cuda::device_ptr<T>(acc);
    const T* b = cuda::device_ptr<T>(x);
    const bool packed = aligned16(a) && aligned16(b);
    const int64_t units = packed ? n / Pack<T>::kSize + n % Pack<T>::kSize : n;
    constexpr int kThreads = TensorMathConfig::kThreads;
    accumulate_kernel<T>
        <<<cuda::grid_for(units, kThreads), kThreads, 0, cuda::current_stream()>>>(a, b, n, packed);
    cuda::launch_check();
  });
}

void scale_inplace_cuda(const Tensor& t, double factor) {
  const int64_t n = t.numel();
  if (n == 0) return;
  cuda::visit_cuda_floating(t.dtype(), "scale_inplace", [&]<class T>() {
    T* p = cuda::device_ptr<T>(t);
    const bool packed = aligned16(p);
    const int64_t units = packed ? n / Pack<T>::kSize + n % Pack<T>::kSize : n;
    constexpr int kThreads = TensorMathConfig::kThreads;
    scale_kernel<T><<<cuda::grid_for(units, kThreads), kThreads, 0, cuda::current_stream()>>>(
        p, n, static_cast<float>(factor), packed);
    cuda::launch_check();
  });
}

std::vector<double> sums_of_squares_cuda(const std::vector<Tensor>& tensors) {
  // partials [kSumBlocks], reused tensor after tensor (the stream orders them), then one total
  // a tensor: one allocation, one copy back, one wait.
  constexpr int kBlocks = TensorMathConfig::kSumBlocks;
  const auto count = static_cast<int64_t>(tensors.size());
  Tensor scratch = Tensor::empty({kBlocks + count}, DType::F64, tensors.front().device());
  double* partials = static_cast<double*>(scratch.raw_data());
  for (int64_t i = 0; i < count; ++i) {
    const Tensor& t = tensors[static_cast<size_t>(i)];
    double* total = partials + kBlocks + i;
    const int64_t n = t.numel();
    unsigned blocks = 0;  // none for an empty tensor: its total is the sum of no partials, 0
    if (n > 0) {
      cuda::visit_cuda_floating(t.dtype(), "sum_of_squares", [&]<class T>() {
        const T* p = cuda::device_ptr<T>(t);
        const bool packed = aligned16(p);
        const int64_t units = packed ? n / Pack<T>::kSize + n % Pack<T>::kSize : n;
        constexpr int kThreads = TensorMathConfig::kThreads;
        blocks = cuda::grid_for(units, kThreads, kBlocks);
        sum_of_squares_partials_kernel<T>
            <<<blocks, kThreads, 0, cuda::current_stream()>>>(partials, p, n, packed);
        cuda::launch_check();
      });
    }
    sum_partials_kernel<<<1, kBlocks, 0, cuda::current_stream()>>>(total, partials,
                                                                   static_cast<int>(blocks));
    cuda::launch_check();
  }
  // The copy to the host waits for the stream.
  Tensor totals = scratch.narrow(0, kBlocks, count).to(Device::cpu());
  return {totals.data<double>(), totals.data<double>() + count};
}

}  // namespace titan::model
