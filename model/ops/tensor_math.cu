// CUDA twins of model/ops/tensor_math.h.
//
// accumulate and scale_inplace are grid-stride element-wise loops that move 16 bytes per load
// when every pointer is 16-byte aligned (a view may start anywhere), with a scalar tail.
//
// sums_of_squares is the gradient norm's reduction over every gradient at once: one launch for
// the whole list (a multi-tensor kernel, the list its parameter), where it took two a tensor. Each
// tensor is cut into chunks of kChunk elements; a block reduces a chunk to one partial, and the
// block that finishes a tensor's last chunk (an atomic count a tensor) adds that tensor's partials
// in chunk order. So a tensor's sum depends only on its own values, never on the blocks' timing or
// on the other tensors in the list: deterministic, and the same bits batched or alone. Each thread
// accumulates its squares in double: on H100/A100 an fp64 FMA per element is far below the memory
// bound (~4 elements/clock/SM), and the result then matches the CPU's double sum to ~1e-15 instead
// of fp32's ~1e-6.
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "core/cuda/launch.cuh"
#include "core/cuda/pack.cuh"
#include "model/ops/tensor_math.h"

namespace titan::model {

namespace {

struct TensorMathConfig {
  static constexpr int kThreads = 256;
  static constexpr int64_t kChunk = int64_t{1} << 16;  // sums_of_squares: elements a partial
  static constexpr int64_t kMaxSumBlocks = 4096;       // sums_of_squares: blocks stride chunks
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
  __syncthreads();  // warp_sums may still be read by the previous call's warp 0
  if (lane == 0) warp_sums[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < static_cast<int>(blockDim.x / 32) ? warp_sums[lane] : 0.0;
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_down_sync(0xffffffffu, v, offset);
  }
  return v;
}

// One tensor of the list: its chunks are [first_chunk, first_chunk + ⌈n / kChunk⌉) of all.
struct SumTensor {
  const void* data;
  int64_t n;
  int64_t first_chunk;
  int32_t bf16;    // else f32
  int32_t packed;  // 16-byte aligned: chunks move in Packs
};

// Up to kMax tensors, passed by value as the kernel's parameter (CUDA 12.1 raised the limit to
// 32,764 bytes): no copy of the list to the device, which from pageable memory would wait for
// the stream, so the launch queues behind the backward that produces the gradients.
struct SumList {
  static constexpr int kMax = 1000;
  int count;
  int first_tensor;     // index of tensors[0] in the whole list (done, totals)
  int64_t first_chunk;  // the chunks of this list: [first_chunk, end_chunk)
  int64_t end_chunk;
  SumTensor tensors[kMax];
};
static_assert(sizeof(SumList) <= 32764, "a kernel parameter holds at most 32,764 bytes");

// Σ x² over elements [begin, end) of x, this thread's share (blockDim.x threads).
template <class T>
__device__ double chunk_squares(const T* x, int64_t begin, int64_t end, bool packed) {
  constexpr int kSize = Pack<T>::kSize;
  double sum = 0;
  int64_t scalar_begin = begin;
  if (packed) {  // begin is a multiple of kChunk, so of kSize: the packs stay aligned
    const int64_t packs = (end - begin) / kSize;
    for (int64_t i = threadIdx.x; i < packs; i += blockDim.x) {
      const Pack<T> a = load_pack(x + begin + i * kSize);
#pragma unroll
      for (int k = 0; k < kSize; ++k) {
        const double v = cuda::load_f32(a.v[k]);
        sum = fma(v, v, sum);
      }
    }
    scalar_begin = begin + packs * kSize;
  }
  for (int64_t i = scalar_begin + threadIdx.x; i < end; i += blockDim.x) {
    const double v = cuda::load_f32(x[i]);
    sum = fma(v, v, sum);
  }
  return sum;
}

// Blocks stride over the chunks of every tensor of the list. partials [all chunks]; done [all
// tensors] counts each tensor's finished chunks (zero at launch); totals [all tensors] gets
// each tensor's sum.
__global__ void sums_of_squares_kernel(const __grid_constant__ SumList list, double* partials,
                                       unsigned* done, double* totals) {
  constexpr int64_t kChunk = TensorMathConfig::kChunk;
  const SumTensor* tensors = list.tensors;
  __shared__ bool last;
  for (int64_t c = list.first_chunk + blockIdx.x; c < list.end_chunk; c += gridDim.x) {
    // The tensor holding chunk c: the last whose first chunk is ≤ c (binary search).
    int lo = 0, hi = list.count - 1;
    while (lo < hi) {
      const int mid = (lo + hi + 1) / 2;
      if (tensors[mid].first_chunk <= c) {
        lo = mid;
      } else {
        hi = mid - 1;
      }
    }
    const SumTensor t = tensors[lo];
    const int64_t begin = (c - t.first_chunk) * kChunk, end = min(t.n, begin + kChunk);
    double sum =
        t.bf16 ? chunk_squares(static_cast<const __nv_bfloat16*>(t.data), begin, end, t.packed)
               : chunk_squares(static_cast<const float*>(t.data), begin, end, t.packed);
    sum = block_sum_to_thread0(sum);
    const auto chunks = static_cast<unsigned>((t.n + kChunk - 1) / kChunk);
    if (threadIdx.x == 0) {
      partials[c] = sum;
      __threadfence();  // the partial is visible before the count says so
      last = atomicAdd(&done[list.first_tensor + lo], 1u) == chunks - 1;
    }
    __syncthreads();
    if (last) {
      // Every partial of this tensor is written: add them in chunk order, through L2 (__ldcg)
      // since other SMs wrote them.
      __threadfence();
      double total = 0;
      for (unsigned i = threadIdx.x; i < chunks; i += blockDim.x) {
        total += __ldcg(partials + t.first_chunk + i);
      }
      total = block_sum_to_thread0(total);
      if (threadIdx.x == 0) totals[list.first_tensor + lo] = total;
    }
    __syncthreads();  // `last` is rewritten by the next chunk
  }
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
  constexpr int64_t kChunk = TensorMathConfig::kChunk;
  const auto count = static_cast<int64_t>(tensors.size());
  TT_CHECK(count <= std::numeric_limits<int>::max(), "sums_of_squares: ", count, " tensors");
  const Device device = tensors.front().device();
  // done [count] (u32, padded to 8 bytes) and totals [count] (f64), zero: an empty tensor has
  // no chunks, so its total stays 0.
  const int64_t totals_offset = (4 * count + 7) / 8 * 8;
  Tensor scratch = Tensor::zeros({totals_offset + 8 * count}, DType::U8, device);
  auto* done = static_cast<unsigned*>(scratch.raw_data());
  auto* totals =
      reinterpret_cast<double*>(static_cast<uint8_t*>(scratch.raw_data()) + totals_offset);

  std::vector<SumTensor> all(static_cast<size_t>(count));
  int64_t total_chunks = 0;
  for (int64_t i = 0; i < count; ++i) {
    const Tensor& t = tensors[static_cast<size_t>(i)];
    TT_CHECK(t.dtype() == DType::F32 || t.dtype() == DType::BF16,
             "sum_of_squares: the CUDA path takes f32 or bf16, got ", dtype_name(t.dtype()));
    const void* data = nullptr;
    if (t.numel() > 0) {
      data = t.dtype() == DType::F32 ? static_cast<const void*>(cuda::device_ptr<float>(t))
                                     : cuda::device_ptr<__nv_bfloat16>(t);
    }
    all[static_cast<size_t>(i)] = {data, t.numel(), total_chunks, t.dtype() == DType::BF16,
                                   data != nullptr && aligned16(data)};
    total_chunks += (t.numel() + kChunk - 1) / kChunk;
  }
  Tensor partials;
  if (total_chunks > 0) partials = Tensor::empty({total_chunks}, DType::F64, device);
  // One launch for every kMax tensors (one for a model's gradients on a rank: 290 for the 8B).
  for (int64_t first = 0; first < count; first += SumList::kMax) {
    SumList list{};
    list.count = static_cast<int>(std::min<int64_t>(SumList::kMax, count - first));
    list.first_tensor = static_cast<int>(first);
    std::copy_n(all.begin() + first, list.count, list.tensors);
    list.first_chunk = list.tensors[0].first_chunk;
    list.end_chunk = first + list.count < count
                         ? all[static_cast<size_t>(first + list.count)].first_chunk
                         : total_chunks;
    const int64_t chunks = list.end_chunk - list.first_chunk;
    if (chunks == 0) continue;
    constexpr int kThreads = TensorMathConfig::kThreads;
    const auto blocks = static_cast<unsigned>(std::min(chunks, TensorMathConfig::kMaxSumBlocks));
    sums_of_squares_kernel<<<blocks, kThreads, 0, cuda::current_stream()>>>(
        list, static_cast<double*>(partials.raw_data()), done, totals);
    cuda::launch_check();
  }
  // The copy to the host waits for the stream.
  Tensor result = scratch.narrow(0, totals_offset, 8 * count).to(Device::cpu());
  std::vector<double> sums(static_cast<size_t>(count));
  std::memcpy(sums.data(), result.raw_data(), sums.size() * sizeof(double));
  return sums;
}

}  // namespace titan::model
