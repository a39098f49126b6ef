// SwiGLU's arithmetic for the device, and the row form of its kernels (one block per row) with
// an epilogue (row_epilogue.cuh): model/ops/swiglu.cu runs the element-wise kernels, and
// fp8/cuda/producer_quantize.cu the row kernels with an epilogue that quantizes each row for the
// FP8 GEMM reading it. Both call swiglu_value and swiglu_grad, so an element is the same bits
// whichever kernel wrote it.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>
#include <initializer_list>

#include "core/check.h"
#include "core/cuda/launch.cuh"
#include "core/cuda/pack.cuh"
#include "core/tensor.h"
#include "model/ops/row_epilogue.cuh"

namespace titan::model::swiglu_rows {

// In fp32 with IEEE expf (no fast-math intrinsics), the CPU twin's order of operations.
__device__ __forceinline__ float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

__device__ __forceinline__ float swiglu_value(float h1, float h3) { return h1 * sigmoid(h1) * h3; }

// d silu(x)/dx = σ(x)·(1 + x·(1 − σ(x)))
__device__ __forceinline__ void swiglu_grad(float d, float h1, float h3, float& dh1, float& dh3) {
  const float s = sigmoid(h1);
  dh1 = d * h3 * s * (1.0f + h1 * (1.0f - s));
  dh3 = d * h1 * s;
}

// A pack of g from packs of h1 and h3; on_value(f32) sees each element as stored.
template <class T, class OnValue>
__device__ __forceinline__ cuda::Pack<T> swiglu_pack(const cuda::Pack<T>& h1,
                                                     const cuda::Pack<T>& h3, OnValue&& on_value) {
  cuda::Pack<T> g;
#pragma unroll
  for (int i = 0; i < cuda::Pack<T>::kSize; ++i) {
    g.v[i] = cuda::store_as<T>(swiglu_value(cuda::load_f32(h1.v[i]), cuda::load_f32(h3.v[i])));
    on_value(cuda::load_f32(g.v[i]));
  }
  return g;
}

// Packs of dh1 and dh3 from packs of dg, h1 and h3; on_value as above.
template <class T, class OnValue>
__device__ __forceinline__ void swiglu_grad_pack(const cuda::Pack<T>& dg, const cuda::Pack<T>& h1,
                                                 const cuda::Pack<T>& h3, cuda::Pack<T>& dh1,
                                                 cuda::Pack<T>& dh3, OnValue&& on_value) {
#pragma unroll
  for (int i = 0; i < cuda::Pack<T>::kSize; ++i) {
    float g1, g3;
    swiglu_grad(cuda::load_f32(dg.v[i]), cuda::load_f32(h1.v[i]), cuda::load_f32(h3.v[i]), g1, g3);
    dh1.v[i] = cuda::store_as<T>(g1);
    dh3.v[i] = cuda::store_as<T>(g3);
    on_value(cuda::load_f32(dh1.v[i]));
    on_value(cuda::load_f32(dh3.v[i]));
  }
}

// Rows of whole 16-byte packs from aligned bases: what the row kernels below take.
inline bool rows_fit(int64_t ffn, size_t element_bytes, std::initializer_list<const void*> ptrs) {
  if (ffn % static_cast<int64_t>(16 / element_bytes) != 0) return false;
  for (const void* p : ptrs) {
    if (!cuda::aligned16(p)) return false;
  }
  return true;
}

// out[t] = swiglu(h13[t]) for block t; the epilogue sees out's row [F].
template <class T, class Epilogue>
__global__ void swiglu_forward_rows_kernel(T* out, const T* h13, int64_t ffn, Epilogue epilogue) {
  using cuda::Pack;
  constexpr int kSize = Pack<T>::kSize;
  const int64_t t = blockIdx.x;
  const T* h1 = h13 + t * 2 * ffn;
  const T* h3 = h1 + ffn;
  T* o = out + t * ffn;
  for (int64_t p = threadIdx.x; p < ffn / kSize; p += blockDim.x) {
    const int64_t f = p * kSize;
    const Pack<T> r = swiglu_pack(cuda::load_pack(h1 + f), cuda::load_pack(h3 + f),
                                  [&](float v) { epilogue.value(v); });
    cuda::store_pack(o + f, r);
  }
  epilogue.row_done(t, static_cast<const T*>(o), ffn);
}

// dh13[t] = [dh1 | dh3] for block t; the epilogue sees dh13's row [2F].
template <class T, class Epilogue>
__global__ void swiglu_backward_rows_kernel(T* dh13, const T* dout, const T* h13, int64_t ffn,
                                            Epilogue epilogue) {
  using cuda::Pack;
  constexpr int kSize = Pack<T>::kSize;
  const int64_t t = blockIdx.x;
  const T* h1 = h13 + t * 2 * ffn;
  const T* h3 = h1 + ffn;
  const T* d = dout + t * ffn;
  T* dh1 = dh13 + t * 2 * ffn;
  T* dh3 = dh1 + ffn;
  for (int64_t p = threadIdx.x; p < ffn / kSize; p += blockDim.x) {
    const int64_t f = p * kSize;
    Pack<T> da, db;
    swiglu_grad_pack(cuda::load_pack(d + f), cuda::load_pack(h1 + f), cuda::load_pack(h3 + f), da,
                     db, [&](float v) { epilogue.value(v); });
    cuda::store_pack(dh1 + f, da);
    cuda::store_pack(dh3 + f, db);
  }
  epilogue.row_done(t, static_cast<const T*>(dh1), 2 * ffn);
}

// The row kernels on h13 [T, 2F]; rows_fit must hold for every tensor.
template <class MakeEpilogue>
void launch_forward_rows(const Tensor& out, const Tensor& h13, MakeEpilogue&& make_epilogue) {
  const int64_t rows = h13.size(0), ffn = h13.size(1) / 2;
  if (rows == 0 || ffn == 0) return;
  cuda::visit_cuda_floating(h13.dtype(), "swiglu_forward", [&]<class T>() {
    T* out_ptr = cuda::device_ptr<T>(out);
    const T* h13_ptr = cuda::device_ptr<T>(h13);
    TT_CHECK(rows_fit(ffn, sizeof(T), {out_ptr, h13_ptr}), "swiglu row kernel: F ", ffn,
             " is not whole 16-byte packs");
    const auto epilogue = make_epilogue.template operator()<T>();
    swiglu_forward_rows_kernel<T>
        <<<static_cast<unsigned>(rows), row_threads(ffn / cuda::Pack<T>::kSize), 0,
           cuda::current_stream()>>>(out_ptr, h13_ptr, ffn, epilogue);
    cuda::launch_check();
  });
}

template <class MakeEpilogue>
void launch_backward_rows(const Tensor& dh13, const Tensor& dout, const Tensor& h13,
                          MakeEpilogue&& make_epilogue) {
  const int64_t rows = h13.size(0), ffn = h13.size(1) / 2;
  if (rows == 0 || ffn == 0) return;
  cuda::visit_cuda_floating(h13.dtype(), "swiglu_backward", [&]<class T>() {
    T* dh13_ptr = cuda::device_ptr<T>(dh13);
    const T* dout_ptr = cuda::device_ptr<T>(dout);
    const T* h13_ptr = cuda::device_ptr<T>(h13);
    TT_CHECK(rows_fit(ffn, sizeof(T), {dh13_ptr, dout_ptr, h13_ptr}), "swiglu row kernel: F ", ffn,
             " is not whole 16-byte packs");
    const auto epilogue = make_epilogue.template operator()<T>();
    swiglu_backward_rows_kernel<T>
        <<<static_cast<unsigned>(rows), row_threads(ffn / cuda::Pack<T>::kSize), 0,
           cuda::current_stream()>>>(dh13_ptr, dout_ptr, h13_ptr, ffn, epilogue);
    cuda::launch_check();
  });
}

}  // namespace titan::model::swiglu_rows
