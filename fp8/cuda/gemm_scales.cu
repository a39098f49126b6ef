// fp8/cuda/gemm_scales.h: the reciprocal scales in cuBLASLt's layouts, one small kernel.
#include <cstdint>

#include "core/cuda/launch.cuh"
#include "fp8/cuda/gemm_scales.h"

namespace titan::fp8 {

namespace {

constexpr int kThreads = 256;

using cuda::ceil_div;
int64_t round_up_4(int64_t n) { return ceil_div(n, 4) * 4; }

// The buffer is [outer, ld]; element (o, i) with i < inner takes 1 / scales[source(o, i)],
// padding (i ≥ inner) takes 0. `transpose` says the source is read across (1x128):
//   1x128:   o = K block, i = row          -> scales[row · k_blocks + o]   ([rows, k_blocks])
//   128x128: o = row tile, i = K block     -> scales[o · k_blocks + i]     ([row_tiles, k_blocks])
//   scalar, rowwise: outer 1, i = index    -> scales[i]
__global__ void dequant_scales_kernel(const float* scales, int64_t outer, int64_t inner,
                                      int64_t ld, int64_t k_blocks, bool transpose, float* out) {
  for (int64_t e = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; e < outer * ld;
       e += int64_t{gridDim.x} * blockDim.x) {
    const int64_t o = e / ld, i = e - o * ld;
    if (i >= inner) {
      out[e] = 0.0f;
      continue;
    }
    const int64_t source = transpose ? i * k_blocks + o : o * inner + i;
    out[e] = __frcp_rn(scales[source]);  // 1.0f / scale, rounded as the CPU's division
  }
}

}  // namespace

Tensor cublaslt_dequant_scales(const Float8Tensor& q) {
  const int64_t rows = q.rows(), k = q.cols(), k_blocks = ceil_div(k, kBlock);
  TT_CHECK(q.scales.device().is_cuda() && q.scales.dtype() == DType::F32 &&
               q.scales.is_contiguous() &&
               q.scales.shape() == scales_shape(q.granularity, rows, k),
           "scaled_gemm: ", granularity_name(q.granularity), " scales ", q.scales, " on ",
           q.scales.device(), " for an operand [", rows, ", ", k, "]");
  int64_t outer = 1, inner = q.scales.numel(), ld = inner;
  bool transpose = false;
  if (q.granularity == Granularity::Block1x128) {
    outer = k_blocks, inner = rows, ld = round_up_4(rows), transpose = true;
  } else if (q.granularity == Granularity::Block128x128) {
    outer = ceil_div(rows, kBlock), inner = k_blocks, ld = round_up_4(k_blocks);
  }
  Tensor out = Tensor::empty({outer * ld}, DType::F32, q.scales.device());
  if (out.numel() == 0) return out;
  dequant_scales_kernel<<<cuda::grid_for(out.numel(), kThreads), kThreads, 0,
                          cuda::current_stream()>>>(q.scales.data<float>(), outer, inner, ld,
                                                    k_blocks, transpose, out.data<float>());
  cuda::launch_check();
  return out;
}

}  // namespace titan::fp8
