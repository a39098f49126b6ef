// The fused producers of fp8/producer_quantize.h on CUDA: model/ops' row kernels
// (rmsnorm_rows.cuh, swiglu_rows.cuh) run with RowQuantize as their epilogue, so the op's
// arithmetic is its own, thread for thread, and the quantization quantize.cu's
// (quantize_device.cuh): the same scales and codes as quantizing the stored output afterwards.
//
// Per row, after the op has stored it:
//   tensorwise   the block's max of the values its threads stored, one atomicMax on the fp32
//                bits into the output's amax (valid because amax ≥ +0, as in quantize.cu); the
//                cast follows as its own pass, once the amax is whole (and reduced over tp)
//   rowwise      that max is the row's amax: the scale, then the codes of the row re-read from
//                L1/L2, 4 elements a thread, 4 codes stored as one word
//   1×128        each warp takes 128-element blocks of the row, re-read: a shuffle max, the
//                scale, the codes (quantize.cu's 1×128 kernel, on a row in cache)
// The re-reads are plain loads, not __ldg: the row was written by this kernel, and the
// read-only path is not coherent with a kernel's own stores. The block's __syncthreads in the
// max makes every thread's stores visible to the others.
#include <cuda_bf16.h>

#include <cstdint>

#include "core/cuda/launch.cuh"
#include "fp8/cuda/quantize_device.cuh"
#include "fp8/producer_quantize.h"
#include "model/ops/rmsnorm_rows.cuh"
#include "model/ops/swiglu_rows.cuh"

namespace titan::fp8 {

namespace {

using namespace device;

// 4 values the block stored, as f32 (16-byte aligned f32, 8-byte aligned bf16).
__device__ __forceinline__ void load4_stored(const float* p, float v[4]) {
  const float4 q = *reinterpret_cast<const float4*>(p);
  v[0] = q.x, v[1] = q.y, v[2] = q.z, v[3] = q.w;
}
__device__ __forceinline__ void load4_stored(const __nv_bfloat16* p, float v[4]) {
  const uint2 q = *reinterpret_cast<const uint2*>(p);
  const float2 lo = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&q.x));
  const float2 hi = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&q.y));
  v[0] = lo.x, v[1] = lo.y, v[2] = hi.x, v[3] = hi.y;
}

// The epilogue (model/ops/row_epilogue.cuh). Rows are whole 16-byte packs (cols % 16 == 0,
// aligned: fp8/producer_quantize.cpp's rows_fuse), so a 4-element group never straddles a
// 1×128 block and its 4 codes are one aligned word.
template <Format F>
struct RowQuantize {
  Granularity granularity = Granularity::Tensorwise;
  bool power_of_two = false;
  float* scales = nullptr;        // rowwise [rows], 1×128 [rows, ⌈cols/128⌉]
  uint8_t* codes = nullptr;       // [rows, cols]
  unsigned* amax_bits = nullptr;  // tensorwise [1]
  float m = 0.0f;                 // this thread's max |value| stored

  __device__ __forceinline__ void value(float v) { m = fmaxf(m, fabsf(v)); }

  template <class T>
  __device__ __forceinline__ void row_done(int64_t t, const T* row, int64_t cols) {
    __shared__ float scratch[32];
    const int warps = static_cast<int>(blockDim.x) / 32;
    const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
    const float wm = warp_max(m);
    if (lane == 0) scratch[warp] = wm;
    __syncthreads();
    float amax = scratch[0];
    for (int w = 1; w < warps; ++w) amax = fmaxf(amax, scratch[w]);
    if (granularity == Granularity::Tensorwise) {
      if (threadIdx.x == 0) atomicMax(amax_bits, __float_as_uint(amax));
    } else if (granularity == Granularity::Rowwise) {
      const float scale = scale_from_amax<F>(amax, power_of_two);
      if (threadIdx.x == 0) scales[t] = scale;
      uint8_t* out = codes + t * cols;
      for (int64_t c = int64_t{threadIdx.x} * 4; c < cols; c += int64_t{blockDim.x} * 4) {
        float v[4];
        uint8_t q[4];
        load4_stored(row + c, v);
        encode_group<F>(v, scale, q);
        *reinterpret_cast<uint32_t*>(out + c) = pack4(q);
      }
    } else {  // Block1x128
      const int64_t blocks = (cols + kBlock - 1) / kBlock;
      for (int64_t b = warp; b < blocks; b += warps) {
        const int64_t c = b * kBlock + lane * 4;
        float v[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        if (c < cols) load4_stored(row + c, v);
        const float scale = scale_from_amax<F>(warp_max(abs_max4(0.0f, v)), power_of_two);
        if (lane == 0) scales[t * blocks + b] = scale;
        if (c < cols) {
          uint8_t q[4];
          encode_group<F>(v, scale, q);
          *reinterpret_cast<uint32_t*>(codes + t * cols + c) = pack4(q);
        }
      }
    }
  }
};

// Makes the epilogue for a launcher's element type (any: RowQuantize reads T in row_done).
template <Format F>
struct RowQuantizes {
  const RowQuantizeOutputs& out;
  template <class T>
  RowQuantize<F> operator()() const {
    RowQuantize<F> e;
    e.granularity = out.scaling.granularity;
    e.power_of_two = out.scaling.power_of_two;
    if (e.granularity == Granularity::Tensorwise) {
      e.amax_bits = reinterpret_cast<unsigned*>(out.amax.data<float>());
    } else {
      e.scales = out.scales.data<float>();
      e.codes = static_cast<uint8_t*>(out.codes.raw_data());
    }
    return e;
  }
};

}  // namespace

void rmsnorm_forward_quantized_cuda(const Tensor& y, const Tensor& rstd, const Tensor& x,
                                    const Tensor* residual, const Tensor& weight, double eps,
                                    const RowQuantizeOutputs& out) {
  visit_format(out.scaling.format, [&]<Format F>() {
    model::rmsnorm_rows::launch_forward_rows(y, rstd, x, residual, weight, eps,
                                             RowQuantizes<F>{out});
  });
}

void rmsnorm_backward_add_quantized_cuda(const Tensor& dx, const Tensor& dweight, const Tensor& dy,
                                         const Tensor& x, const Tensor& weight, const Tensor& rstd,
                                         const Tensor* dresidual, const RowQuantizeOutputs& out) {
  visit_format(out.scaling.format, [&]<Format F>() {
    model::rmsnorm_rows::launch_backward_dx_rows(dx, dy, x, weight, rstd, dresidual,
                                                 RowQuantizes<F>{out});
  });
  model::rmsnorm_rows::rmsnorm_dweight_cuda(dweight, dy, x, rstd);
}

void swiglu_forward_quantized_cuda(const Tensor& out, const Tensor& h13,
                                   const RowQuantizeOutputs& q) {
  visit_format(q.scaling.format, [&]<Format F>() {
    model::swiglu_rows::launch_forward_rows(out, h13, RowQuantizes<F>{q});
  });
}

void swiglu_backward_quantized_cuda(const Tensor& dh13, const Tensor& dout, const Tensor& h13,
                                    const RowQuantizeOutputs& q) {
  visit_format(q.scaling.format, [&]<Format F>() {
    model::swiglu_rows::launch_backward_rows(dh13, dout, h13, RowQuantizes<F>{q});
  });
}

}  // namespace titan::fp8
