// CUDA twin of model/ops/swiglu.h.
//
// Element-wise over [T, F] with a grid-stride loop. Element (t, f) reads h1 = h13[t, f] and
// h3 = h13[t, F + f]; when F is whole 16-byte packs and the pointers are aligned, a thread
// handles one pack of each. The arithmetic (swiglu_rows.cuh, shared with the fused SwiGLU + FP8
// quantize of fp8/) is the CPU twin's, in the same order, in fp32 with IEEE expf.
#include <cuda_bf16.h>

#include <cstdint>

#include "core/cuda/launch.cuh"
#include "core/cuda/pack.cuh"
#include "model/ops/swiglu.h"
#include "model/ops/swiglu_rows.cuh"

namespace titan::model {

namespace {

struct SwigluConfig {
  static constexpr int kThreads = 256;
};

using cuda::aligned16;
using cuda::load_pack;
using cuda::Pack;
using cuda::store_pack;

using swiglu_rows::swiglu_grad;
using swiglu_rows::swiglu_value;

// kSize elements per unit (1 when not packed); units are (row, column block) pairs.
template <class T, bool kPacked>
__global__ void swiglu_forward_kernel(T* out, const T* h13, int64_t rows, int64_t ffn) {
  constexpr int kSize = kPacked ? Pack<T>::kSize : 1;
  const int64_t units_per_row = ffn / kSize, units = rows * units_per_row;
  for (int64_t u = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; u < units;
       u += int64_t{gridDim.x} * blockDim.x) {
    const int64_t t = u / units_per_row, f = (u - t * units_per_row) * kSize;
    const T* h1 = h13 + t * 2 * ffn + f;
    const T* h3 = h1 + ffn;
    T* o = out + t * ffn + f;
    if constexpr (kPacked) {
      store_pack(o, swiglu_rows::swiglu_pack(load_pack(h1), load_pack(h3), [](float) {}));
    } else {
      *o = cuda::store_as<T>(swiglu_value(cuda::load_f32(*h1), cuda::load_f32(*h3)));
    }
  }
}

template <class T, bool kPacked>
__global__ void swiglu_backward_kernel(T* dh13, const T* dout, const T* h13, int64_t rows,
                                       int64_t ffn) {
  constexpr int kSize = kPacked ? Pack<T>::kSize : 1;
  const int64_t units_per_row = ffn / kSize, units = rows * units_per_row;
  for (int64_t u = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; u < units;
       u += int64_t{gridDim.x} * blockDim.x) {
    const int64_t t = u / units_per_row, f = (u - t * units_per_row) * kSize;
    const T* h1 = h13 + t * 2 * ffn + f;
    const T* h3 = h1 + ffn;
    const T* d = dout + t * ffn + f;
    T* dh1 = dh13 + t * 2 * ffn + f;
    T* dh3 = dh1 + ffn;
    if constexpr (kPacked) {
      Pack<T> da, db;
      swiglu_rows::swiglu_grad_pack(load_pack(d), load_pack(h1), load_pack(h3), da, db,
                                    [](float) {});
      store_pack(dh1, da);
      store_pack(dh3, db);
    } else {
      float g1, g3;
      swiglu_grad(cuda::load_f32(*d), cuda::load_f32(*h1), cuda::load_f32(*h3), g1, g3);
      *dh1 = cuda::store_as<T>(g1);
      *dh3 = cuda::store_as<T>(g3);
    }
  }
}

}  // namespace

void swiglu_forward_cuda(const Tensor& out, const Tensor& h13) {
  const int64_t rows = h13.size(0), ffn = h13.size(1) / 2;
  if (rows == 0 || ffn == 0) return;
  cuda::visit_cuda_floating(h13.dtype(), "swiglu_forward", [&]<class T>() {
    T* out_ptr = cuda::device_ptr<T>(out);
    const T* h13_ptr = cuda::device_ptr<T>(h13);
    const bool packed = ffn % Pack<T>::kSize == 0 && aligned16(out_ptr) && aligned16(h13_ptr);
    const int64_t units = rows * (packed ? ffn / Pack<T>::kSize : ffn);
    constexpr int kThreads = SwigluConfig::kThreads;
    const unsigned blocks = cuda::grid_for(units, kThreads);
    cudaStream_t stream = cuda::current_stream();
    if (packed) {
      swiglu_forward_kernel<T, true><<<blocks, kThreads, 0, stream>>>(out_ptr, h13_ptr, rows, ffn);
    } else {
      swiglu_forward_kernel<T, false><<<blocks, kThreads, 0, stream>>>(out_ptr, h13_ptr, rows, ffn);
    }
    cuda::launch_check();
  });
}

void swiglu_backward_cuda(const Tensor& dh13, const Tensor& dout, const Tensor& h13) {
  const int64_t rows = h13.size(0), ffn = h13.size(1) / 2;
  if (rows == 0 || ffn == 0) return;
  cuda::visit_cuda_floating(h13.dtype(), "swiglu_backward", [&]<class T>() {
    T* dh13_ptr = cuda::device_ptr<T>(dh13);
    const T* dout_ptr = cuda::device_ptr<T>(dout);
    const T* h13_ptr = cuda::device_ptr<T>(h13);
    const bool packed = ffn % Pack<T>::kSize == 0 && aligned16(dh13_ptr) && aligned16(dout_ptr) &&
                        aligned16(h13_ptr);
    const int64_t units = rows * (packed ? ffn / Pack<T>::kSize : ffn);
    constexpr int kThreads = SwigluConfig::kThreads;
    const unsigned blocks = cuda::grid_for(units, kThreads);
    cudaStream_t stream = cuda::current_stream();
    if (packed) {
      swiglu_backward_kernel<T, true>
          <<<blocks, kThreads, 0, stream>>>(dh13_ptr, dout_ptr, h13_ptr, rows, ffn);
    } else {
      swiglu_backward_kernel<T, false>
          <<<blocks, kThreads, 0, stream>>>(dh13_ptr, dout_ptr, h13_ptr, rows, ffn);
    }
    cuda::launch_check();
  });
}

}  // namespace titan::model
