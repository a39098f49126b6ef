// Scales, quantization and the emulated FP8 GEMM: amax and scales per granularity, power-of-two
// rounding, the quantization error bound, and the scaled GEMM against the same arithmetic in
// double (the CPU emulation is the oracle for cuBLASLt, so it must itself be right).
#include <doctest/doctest.h>

#include <bit>
#include <cmath>

#include "core/rng.h"
#include "fp8/float8_tensor.h"
#include "fp8/scaled_gemm.h"

using namespace titan;
using namespace titan::fp8;

namespace {

// [rows, cols] f32 of N(0, std²) values with a few large outliers, the shape of real activations.
Tensor activations(const char* name, int64_t rows, int64_t cols, double std = 1.0) {
  Tensor t = Tensor::empty({rows, cols}, DType::F32);
  CounterRng rng(11, name);
  for (int64_t i = 0; i < rows * cols; ++i) {
    double v = std * rng.normal(static_cast<uint64_t>(i));
    if (i % 997 == 0) v *= 30;  // outliers
    t.data<float>()[i] = static_cast<float>(v);
  }
  return t;
}

struct Case {
  Granularity a, b;
  Format fa, fb;
};

}  // namespace

TEST_SUITE("fast") {
  TEST_CASE("amax and scales follow the granularity") {
    Tensor x = Tensor::from_vector<float>({1, -2, 3, -4, 5, -6}, {2, 3});
    CHECK(compute_amax(x, Granularity::Tensorwise).data<float>()[0] == 6);
    Tensor rows = compute_amax(x, Granularity::Rowwise);
    CHECK(rows.data<float>()[0] == 3);
    CHECK(rows.data<float>()[1] == 6);
    Tensor big = activations("big", 130, 300);
    Tensor block = compute_amax(big, Granularity::Block1x128);
    CHECK(block.shape() == Shape{130, 3});
    Tensor tile = compute_amax(big, Granularity::Block128x128);
    CHECK(tile.shape() == Shape{2, 3});
    float expected = 0;
    for (int64_t r = 128; r < 130; ++r)
      for (int64_t c = 256; c < 300; ++c)
        expected = std::max(expected, std::fabs(big.data<float>()[r * 300 + c]));
    CHECK(tile.data<float>()[1 * 3 + 2] == expected);
    // scale = fp8_max / amax, and an all-zero block gets a finite scale.
    Tensor scales = scales_from_amax(Tensor::from_vector<float>({448, 0}, {2}), Format::E4M3, false);
    CHECK(scales.data<float>()[0] == 1.0f);
    CHECK(std::isfinite(scales.data<float>()[1]));
  }

  TEST_CASE("power-of-two scales round down to a power of two") {
    Tensor amax = Tensor::from_vector<float>({3.0f, 448.0f, 0.01f, 1000.0f}, {4});
    Tensor exact = scales_from_amax(amax, Format::E4M3, false);
    Tensor pow2 = scales_from_amax(amax, Format::E4M3, true);
    for (int i = 0; i < 4; ++i) {
      const float s = pow2.data<float>()[i];
      CHECK((std::bit_cast<uint32_t>(s) & 0x007FFFFFu) == 0);  // no mantissa bits
      CHECK(s <= exact.data<float>()[i]);
      CHECK(s > exact.data<float>()[i] / 2);
    }
    CHECK(pow2.data<float>()[0] == 128.0f);  // 448 / 3 = 149.3 -> 128
  }

  TEST_CASE("quantize then dequantize is within half an FP8 ulp of every value") {
    for (Format format : {Format::E4M3, Format::E5M2}) {
      for (Granularity g : {Granularity::Tensorwise, Granularity::Rowwise, Granularity::Block1x128,
                            Granularity::Block128x128}) {
        CAPTURE(format_name(format));
        CAPTURE(granularity_name(g));
        Tensor x = activations("roundtrip", 130, 260);
        Float8Tensor q = quantize(x, g, format);
        Tensor back = dequantize(q);
        const double half_ulp = format == Format::E4M3 ? 1.0 / 16 : 1.0 / 8;  // relative
        int bad = 0;
        for (int64_t r = 0; r < 130; ++r) {
          for (int64_t c = 0; c < 260; ++c) {
            const double v = x.data<float>()[r * 260 + c], w = back.data<float>()[r * 260 + c];
            // Below FP8's normal range the error is absolute: half the smallest subnormal.
            const double floor = (format == Format::E4M3 ? std::ldexp(1.0, -10) : std::ldexp(1.0, -17)) /
                                 q.scale_at(r, c);
            bad += std::fabs(v - w) > half_ulp * std::fabs(v) * 1.0001 + floor;
          }
        }
        CHECK(bad == 0);
      }
    }
  }

  TEST_CASE("the emulated FP8 GEMM equals the same arithmetic in double to fp32 rounding") {
    const Case cases[] = {
        {Granularity::Tensorwise, Granularity::Tensorwise, Format::E4M3, Format::E4M3},
        {Granularity::Tensorwise, Granularity::Tensorwise, Format::E5M2, Format::E4M3},
        {Granularity::Rowwise, Granularity::Rowwise, Format::E4M3, Format::E4M3},
        {Granularity::Block1x128, Granularity::Block128x128, Format::E4M3, Format::E4M3},
        {Granularity::Block1x128, Granularity::Block1x128, Format::E4M3, Format::E4M3},
    };
    const int64_t M = 70, N = 130, K = 300;  // K not a multiple of 128: a short last block
    for (const Case& c : cases) {
      CAPTURE(granularity_name(c.a));
      CAPTURE(granularity_name(c.b));
      Float8Tensor a = quantize(activations("a", M, K), c.a, c.fa);
      Float8Tensor b = quantize(activations("b", N, K, 0.05), c.b, c.fb);
      Tensor out = Tensor::empty({M, N}, DType::F32);
      scaled_gemm(a, b, out, false);
      Tensor da = dequantize(a), db = dequantize(b);
      int bad = 0;
      for (int64_t m = 0; m < M; ++m) {
        for (int64_t n = 0; n < N; ++n) {
          double exact = 0, magnitude = 0;
          for (int64_t k = 0; k < K; ++k) {
            const double term = static_cast<double>(da.data<float>()[m * K + k]) *
                                static_cast<double>(db.data<float>()[n * K + k]);
            exact += term;
            magnitude += std::fabs(term);
          }
          // fp32 summation of K terms plus the scaling: the classic bound (K + 3)·u·Σ|terms|,
          // u = 2⁻²⁴; and the dequantized operands themselves carry a rounding of u each.
          const double bound = (K + 5) * std::ldexp(1.0, -24) * magnitude;
          bad += std::fabs(out.data<float>()[m * N + n] - exact) > bound;
        }
      }
      CHECK(bad == 0);
    }
  }

  TEST_CASE("the FP8 GEMM accumulates into its output when asked") {
    Float8Tensor a = quantize(activations("acc_a", 4, 32), Granularity::Tensorwise, Format::E4M3);
    Float8Tensor b = quantize(activations("acc_b", 5, 32), Granularity::Tensorwise, Format::E4M3);
    Tensor once = Tensor::empty({4, 5}, DType::F32), twice = Tensor::empty({4, 5}, DType::F32);
    scaled_gemm(a, b, once, false);
    scaled_gemm(a, b, twice, false);
    scaled_gemm(a, b, twice, true);
    for (int i = 0; i < 20; ++i) CHECK(twice.data<float>()[i] == 2 * once.data<float>()[i]);
  }

  TEST_CASE("transpose_2d transposes") {
    Tensor x = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
    Tensor t = transpose_2d(x);
    CHECK(t.shape() == Shape{3, 2});
    CHECK(t.data<float>()[1] == 4);
    CHECK(t.data<float>()[4] == 3);
  }
}

TEST_SUITE("fast") {
  TEST_CASE("quantize_transposed equals quantize of transpose_2d") {
    // Backward's transposed operands (dyᵀ, xᵀ, wᵀ) are quantized from high precision along the
    // other axis: the CPU twin is the definition the CUDA kernel is tested against.
    Tensor x = activations("transposed", 130, 300);
    for (Granularity g : {Granularity::Tensorwise, Granularity::Rowwise, Granularity::Block1x128,
                          Granularity::Block128x128}) {
      for (bool pow2 : {false, true}) {
        CAPTURE(granularity_name(g));
        Float8Tensor t = quantize_transposed(x, g, Format::E4M3, pow2);
        Float8Tensor expected = quantize(transpose_2d(x), g, Format::E4M3, pow2);
        CHECK(t.codes.shape() == Shape{300, 130});
        CHECK(t.scales.shape() == scales_shape(g, 300, 130));
        CHECK(t.granularity == g);
        int differ = 0;
        for (int64_t i = 0; i < t.codes.numel(); ++i) {
          differ += t.codes.data<e4m3_t>()[i].bits != expected.codes.data<e4m3_t>()[i].bits;
        }
        for (int64_t i = 0; i < t.scales.numel(); ++i) {
          differ += t.scales.data<float>()[i] != expected.scales.data<float>()[i];
        }
        CHECK(differ == 0);
      }
    }
  }
}
