#include "fp8/scaled_gemm.h"

#include <algorithm>

#include "core/check.h"
#include "core/gemm.h"

namespace titan::fp8 {

namespace {

// The FP8 values of columns [k0, k0 + width) of q, as f32 (exact): [rows, width].
Tensor decoded_columns(const Float8Tensor& q, int64_t k0, int64_t width) {
  Tensor out = Tensor::empty({q.rows(), width}, DType::F32);
  const auto* codes = static_cast<const uint8_t*>(q.codes.raw_data());
  float* dst = out.data<float>();
  for (int64_t r = 0; r < q.rows(); ++r) {
    decode_scaled(codes + r * q.cols() + k0, dst + r * width, width, 1.0f, q.format);
  }
  return out;
}

}  // namespace

void scaled_gemm(const Float8Tensor& a, const Float8Tensor& b, const Tensor& out, bool accumulate,
                 bool fast_accumulation) {
#if TITAN_CUDA
  if (a.codes.device().is_cuda()) {
    scaled_gemm_cuda(a, b, out, accumulate, fast_accumulation);
    return;
  }
#endif
  (void)fast_accumulation;  // the emulation sums in fp32 throughout: there is no fast mode
  TT_CHECK(a.codes.device().is_cpu() && b.codes.device().is_cpu() && out.device().is_cpu(),
           "scaled_gemm: operands on ", a.codes.device(), " and ", b.codes.device(), ", output on ",
           out.device());
  const int64_t M = a.rows(), N = b.rows(), K = a.cols();
  TT_CHECK(b.cols() == K, "scaled_gemm: A [", M, ", ", K, "] · B [", N, ", ", b.cols(), "]ᵀ");
  TT_CHECK(out.ndim() == 2 && out.size(0) == M && out.size(1) == N && out.dtype() == DType::F32 &&
               out.is_contiguous(),
           "scaled_gemm: output ", out, " for [", M, ", ", N, "]");
  TT_CHECK(is_block(a.granularity) == is_block(b.granularity),
           "scaled_gemm: ", granularity_name(a.granularity), " A with ",
           granularity_name(b.granularity), " B: block scaling needs both operands block-scaled");
  if (!accumulate) out.zero_();
  // K is summed in one piece, or per 128-wide block when the scales change along K.
  const int64_t step = is_block(a.granularity) ? kBlock : K;
  Tensor partial = Tensor::empty({M, N}, DType::F32);
  float* o = out.data<float>();
  const float* p = partial.data<float>();
  for (int64_t k0 = 0; k0 < K; k0 += step) {
    const int64_t width = std::min(step, K - k0);
    gemm(decoded_columns(a, k0, width), false, decoded_columns(b, k0, width), true, partial);
    for (int64_t m = 0; m < M; ++m) {
      // cuBLASLt is given the inverse scales and multiplies the fp32 accumulator by them.
      const float inv_a = 1.0f / a.scale_at(m, k0);
      for (int64_t n = 0; n < N; ++n) {
        o[m * N + n] += p[m * N + n] * (inv_a * (1.0f / b.scale_at(n, k0)));
      }
    }
  }
}

}  // namespace titan::fp8
