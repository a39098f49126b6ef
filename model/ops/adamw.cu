// CUDA twin of model/ops/adamw.h.
//
// One grid-stride pass over the shard: read param, exp_avg, exp_avg_sq, grad (16 bytes at a
// time when all four are aligned), write the first three and, when asked, the bf16 working copy.
// The update is written with the _rn intrinsics: they forbid nvcc's FMA contraction, so each
// operation rounds exactly as the CPU twin's does (x86-64 has no FMA without -march, and sqrt
// and division are IEEE on both sides). The CPU stays the bit-exact oracle of the optimizer.
#include <cuda_bf16.h>

#include <cstdint>

#include "core/cuda/launch.cuh"
#include "core/cuda/pack.cuh"
#include "model/ops/adamw.h"

namespace titan::model {

namespace {

struct AdamWConfig {
  static constexpr int kThreads = 256;
};

using cuda::aligned16;

// adamw.cpp's loop body, operation for operation.
__device__ __forceinline__ void adamw_update(float& p, float& m, float& v, float g,
                                             const AdamWScalars<float>& s) {
  m = __fadd_rn(__fmul_rn(s.beta1, m), __fmul_rn(s.one_minus_beta1, g));
  v = __fadd_rn(__fmul_rn(s.beta2, v), __fmul_rn(__fmul_rn(s.one_minus_beta2, g), g));
  const float denom = __fadd_rn(__fmul_rn(__fsqrt_rn(v), s.inv_sqrt_bias2), s.eps);
  p = __fsub_rn(__fmul_rn(p, s.decay), __fdiv_rn(__fmul_rn(s.step_size, m), denom));
}

// working may be null. With `packed`, elements [0, n - n % 4) go as float4.
__global__ void adamw_kernel(float* param, float* exp_avg, float* exp_avg_sq, const float* grad,
                             __nv_bfloat16* working, int64_t n, AdamWScalars<float> s,
                             bool packed) {
  const int64_t first = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  const int64_t packs = packed ? n / 4 : 0;
  for (int64_t i = first; i < packs; i += stride) {
    float4 p = reinterpret_cast<float4*>(param)[i];
    float4 m = reinterpret_cast<float4*>(exp_avg)[i];
    float4 v = reinterpret_cast<float4*>(exp_avg_sq)[i];
    const float4 g = reinterpret_cast<const float4*>(grad)[i];
    adamw_update(p.x, m.x, v.x, g.x, s);
    adamw_update(p.y, m.y, v.y, g.y, s);
    adamw_update(p.z, m.z, v.z, g.z, s);
    adamw_update(p.w, m.w, v.w, g.w, s);
    reinterpret_cast<float4*>(param)[i] = p;
    reinterpret_cast<float4*>(exp_avg)[i] = m;
    reinterpret_cast<float4*>(exp_avg_sq)[i] = v;
    if (working != nullptr) {
      __nv_bfloat16* w = working + i * 4;
      w[0] = __float2bfloat16_rn(p.x);
      w[1] = __float2bfloat16_rn(p.y);
      w[2] = __float2bfloat16_rn(p.z);
      w[3] = __float2bfloat16_rn(p.w);
    }
  }
  for (int64_t i = packs * 4 + first; i < n; i += stride) {
    float p = param[i], m = exp_avg[i], v = exp_avg_sq[i];
    adamw_update(p, m, v, grad[i], s);
    param[i] = p;
    exp_avg[i] = m;
    exp_avg_sq[i] = v;
    if (working != nullptr) working[i] = __float2bfloat16_rn(p);
  }
}

// With bf16 moments (optimizer.state_dtype bfloat16): each element read widened, updated as
// above in f32, the moments stored rounded to nearest even, as the CPU twin does. No packed path:
// the pass is bound by the f32 param and grad either way.
__global__ void adamw_bf16_moments_kernel(float* param, __nv_bfloat16* exp_avg,
                                          __nv_bfloat16* exp_avg_sq, const float* grad,
                                          __nv_bfloat16* working, int64_t n,
                                          AdamWScalars<float> s) {
  const int64_t first = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  for (int64_t i = first; i < n; i += stride) {
    float p = param[i];
    float m = __bfloat162float(exp_avg[i]);
    float v = __bfloat162float(exp_avg_sq[i]);
    adamw_update(p, m, v, grad[i], s);
    param[i] = p;
    exp_avg[i] = __float2bfloat16_rn(m);
    exp_avg_sq[i] = __float2bfloat16_rn(v);
    if (working != nullptr) working[i] = __float2bfloat16_rn(p);
  }
}

}  // namespace

void adamw_step_cuda(const Tensor& param, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                     const Tensor& grad, const AdamWHyper& hyper, const Tensor& bf16_param) {
  const int64_t n = param.numel();
  if (n == 0) return;
  float* p = cuda::device_ptr<float>(param);
  __nv_bfloat16* working =
      bf16_param.defined() ? cuda::device_ptr<__nv_bfloat16>(bf16_param) : nullptr;
  constexpr int kThreads = AdamWConfig::kThreads;
  if (exp_avg.dtype() == DType::BF16) {
    adamw_bf16_moments_kernel<<<cuda::grid_for(n, kThreads), kThreads, 0,
                                cuda::current_stream()>>>(
        p, cuda::device_ptr<__nv_bfloat16>(exp_avg), cuda::device_ptr<__nv_bfloat16>(exp_avg_sq),
        cuda::device_ptr<float>(grad), working, n, adamw_scalars<float>(hyper));
    cuda::launch_check();
    return;
  }
  float* m = cuda::device_ptr<float>(exp_avg);
  float* v = cuda::device_ptr<float>(exp_avg_sq);
  const float* g = cuda::device_ptr<float>(grad);
  const bool packed = aligned16(p) && aligned16(m) && aligned16(v) && aligned16(g);
  const int64_t units = packed ? n / 4 + n % 4 : n;
  adamw_kernel<<<cuda::grid_for(units, kThreads), kThreads, 0, cuda::current_stream()>>>(
      p, m, v, g, working, n, adamw_scalars<float>(hyper), packed);
  cuda::launch_check();
}

}  // namespace titan::model
