// fp8/ on CUDA against the CPU oracle on the same inputs.
//
// Quantization must be bit-identical: same amaxes, same fp32 scales (power of two or not), same
// SATFINITE codes — for f32 and bf16 inputs (a bf16 input is compared with the CPU quantizing
// the same bf16-rounded values as f32), on shapes whose rows, 1x128 blocks and 128x128 tiles
// are partial. The cuBLASLt GEMM is compared with the emulation by relative L2 error: products
// of FP8 values are exact, but Hopper's FP8 tensor cores add them in an accumulator narrower
// than fp32 (see the GEMM test for the bounds and the measured errors).
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "core/cast.h"
#include "fp8/cuda/gemm_scales.h"
#include "fp8/float8_tensor.h"
#include "fp8/recipe.h"
#include "fp8/scaled_gemm.h"
#include "support/gpu.h"
#include "support/tensor_testing.h"

using namespace titan;
using namespace titan::fp8;
using titan::testing::bf16_values;
using titan::testing::bitwise_equal;
using titan::testing::random_tensor;
using titan::testing::relative_l2_error;

namespace {

const Device kFp8Gpu = Device::cuda(0);

constexpr Granularity kGranularities[] = {Granularity::Tensorwise, Granularity::Rowwise,
                                          Granularity::Block1x128, Granularity::Block128x128};
constexpr Format kFormats[] = {Format::E4M3, Format::E5M2};

// [rows, cols] f32 on the host: uniform values whose magnitude changes by powers of two from
// row to row and from column block to column block (so rows, blocks and tiles get different
// scales), one zero row, one zero column, a large outlier, values that land on FP8 subnormals
// next to it, and one NaN (skipped by the amax, encoded as 0x7F).
Tensor quantize_input(int64_t rows, int64_t cols, uint64_t seed) {
  Tensor x = random_tensor({rows, cols}, DType::F32, seed);
  float* p = x.data<float>();
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      p[r * cols + c] *= std::ldexp(1.0f, static_cast<int>((r % 17) + 3 * ((c / 128) % 3)) - 8);
      if (r == 3 % rows || c == 5 % cols) p[r * cols + c] = 0.0f;
    }
  }
  const int64_t n = rows * cols;
  p[(n * 2) / 3] = 3.0e4f;  // an outlier: everything else in its row/block/tile is tiny
  p[(n * 2) / 3 + 1] = 1.0e-3f;
  p[(n * 2) / 3 + 2] = -2.0e-6f;
  p[n / 2] = std::numeric_limits<float>::quiet_NaN();
  return x;
}

// What the CPU sees of a bf16 input: the same values rounded to bf16, as f32.

// The input on the GPU in `dtype`, and the f32 values the CPU oracle quantizes.
struct Inputs {
  Tensor device, host;
};
Inputs inputs(const Tensor& x, DType dtype) {
  if (dtype == DType::F32) return {x.to(kFp8Gpu), x};
  return {cast(x, DType::BF16).to(kFp8Gpu), bf16_values(x)};
}

// "" when the two host tensors have the same bytes, else where the first difference is. Two
// f32 NaNs count as equal (dequantizing code 0x7F gives a NaN whose payload is the decoder's).
std::string first_difference(const Tensor& actual, const Tensor& expected) {
  if (actual.dtype() != expected.dtype() || actual.shape() != expected.shape()) {
    std::ostringstream os;
    os << "got " << actual << ", expected " << expected;
    return os.str();
  }
  const size_t element = dtype_size(actual.dtype());
  const auto* a = static_cast<const unsigned char*>(actual.raw_data());
  const auto* e = static_cast<const unsigned char*>(expected.raw_data());
  int64_t mismatches = 0, first = -1;
  for (int64_t i = 0; i < actual.numel(); ++i) {
    if (actual.dtype() == DType::F32 &&
        std::isnan(static_cast<const float*>(actual.raw_data())[i]) &&
        std::isnan(static_cast<const float*>(expected.raw_data())[i])) {
      continue;
    }
    if (std::memcmp(a + i * element, e + i * element, element) != 0) {
      if (first < 0) first = i;
      ++mismatches;
    }
  }
  if (mismatches == 0) return "";
  std::ostringstream os;
  os << mismatches << " of " << actual.numel() << " elements differ; first at flat index " << first;
  if (actual.dtype() == DType::F32) {
    os << ": " << static_cast<const float*>(actual.raw_data())[first] << " vs "
       << static_cast<const float*>(expected.raw_data())[first];
  } else if (element == 1) {
    os << ": 0x" << std::hex << int{a[first]} << " vs 0x" << int{e[first]};
  }
  return os.str();
}

#define CHECK_SAME_BYTES(actual_host, expected_host)                              \
  do {                                                                            \
    std::string tt_difference = first_difference((actual_host), (expected_host)); \
    CHECK_MESSAGE(tt_difference.empty(), tt_difference);                          \
  } while (0)

void check_same(const Float8Tensor& gpu, const Float8Tensor& cpu) {
  CHECK(gpu.codes.device() == kFp8Gpu);
  CHECK(gpu.granularity == cpu.granularity);
  CHECK(gpu.format == cpu.format);
  CHECK_SAME_BYTES(gpu.scales.to(Device::cpu()), cpu.scales);
  CHECK_SAME_BYTES(gpu.codes.to(Device::cpu()), cpu.codes);
}

// Shapes with partial 1x128 blocks and 128x128 tiles, rows that are not a multiple of 16
// (scalar stores of xᵀ), an aligned one (vector paths everywhere) and columns that are not a
// multiple of 4 (scalar loads).
constexpr int64_t kShapes[][2] = {{257, 384}, {300, 200}, {256, 384}, {37, 7}};

// An FP8 GEMM of a recipe: how A and B are quantized.
struct GemmCase {
  const char* name;
  OperandScaling a, b;
};

// The four recipe GEMMs (fp8/recipe.h), with the tensorwise gradient's e5m2.
const GemmCase kGemmCases[] = {
    {"tensorwise e4m3",
     {Granularity::Tensorwise, Format::E4M3, false},
     {Granularity::Tensorwise, Format::E4M3, false}},
    {"tensorwise e5m2 x e4m3",
     {Granularity::Tensorwise, Format::E5M2, false},
     {Granularity::Tensorwise, Format::E4M3, false}},
    {"rowwise pow2",
     {Granularity::Rowwise, Format::E4M3, true},
     {Granularity::Rowwise, Format::E4M3, true}},
    {"blockwise 1x128 x 128x128",
     {Granularity::Block1x128, Format::E4M3, false},
     {Granularity::Block128x128, Format::E4M3, false}},
    {"blockwise 1x128 x 1x128",
     {Granularity::Block1x128, Format::E4M3, false},
     {Granularity::Block1x128, Format::E4M3, false}},
};

constexpr int64_t kGemmShapes[][3] = {{256, 512, 384}, {272, 528, 1024}};  // M, N, K

Float8Tensor to_gpu(const Float8Tensor& q) {
  Float8Tensor g = q;
  g.codes = q.codes.to(kFp8Gpu);
  g.scales = q.scales.to(kFp8Gpu);
  return g;
}

// Operands of N(0,1)-like activations and 0.05-scaled weights, quantized on the CPU; the GPU
// gets the same codes and scales, so these tests see the GEMM alone.
struct GemmOperands {
  Float8Tensor a, b;
};
GemmOperands gemm_operands(const GemmCase& c, int64_t m, int64_t n, int64_t k) {
  Tensor x = random_tensor({m, k}, DType::F32, 21);
  Tensor w = random_tensor({n, k}, DType::F32, 22, 0.05);
  return {quantize(x, c.a.granularity, c.a.format, c.a.power_of_two),
          quantize(w, c.b.granularity, c.b.format, c.b.power_of_two)};
}

// Calls check(inputs, granularity, format, power_of_two) for every shape of kShapes, input
// dtype (f32, bf16), granularity, format and scale rounding, with all of them CAPTUREd.
template <class Check>
void for_each_quantize_case(uint64_t seed, Check check) {
  for (const auto& shape : kShapes) {
    Tensor x = quantize_input(shape[0], shape[1], seed);
    for (DType dtype : {DType::F32, DType::BF16}) {
      Inputs in = inputs(x, dtype);
      for (Granularity g : kGranularities) {
        for (Format f : kFormats) {
          for (bool pow2 : {false, true}) {
            CAPTURE(shape[0]);
            CAPTURE(shape[1]);
            CAPTURE(dtype_name(dtype));
            CAPTURE(granularity_name(g));
            CAPTURE(format_name(f));
            CAPTURE(pow2);
            check(in, g, f, pow2);
          }
        }
      }
    }
  }
}

}  // namespace

TEST_SUITE("fast gpu") {
  TEST_CASE("gpu: fp8 amax and scales match the CPU bit for bit") {
    SKIP_WITHOUT_CUDA_DEVICE();
    for (const auto& shape : kShapes) {
      Tensor x = quantize_input(shape[0], shape[1], 1);
      for (DType dtype : {DType::F32, DType::BF16}) {
        Inputs in = inputs(x, dtype);
        for (Granularity g : kGranularities) {
          CAPTURE(shape[0]);
          CAPTURE(shape[1]);
          CAPTURE(dtype_name(dtype));
          CAPTURE(granularity_name(g));
          Tensor amax = compute_amax(in.device, g);
          Tensor expected_amax = compute_amax(in.host, g);
          CHECK_SAME_BYTES(amax.to(Device::cpu()), expected_amax);
          for (Format f : kFormats) {
            for (bool pow2 : {false, true}) {
              CHECK_SAME_BYTES(scales_from_amax(amax, f, pow2).to(Device::cpu()),
                               scales_from_amax(expected_amax, f, pow2));
            }
          }
        }
      }
    }
  }

  TEST_CASE("gpu: fp8 quantize matches the CPU bit for bit for every granularity and format") {
    SKIP_WITHOUT_CUDA_DEVICE();
    for_each_quantize_case(2, [](const Inputs& in, Granularity g, Format f, bool pow2) {
      check_same(quantize(in.device, g, f, pow2), quantize(in.host, g, f, pow2));
    });
  }

  TEST_CASE("gpu: fp8 quantize of an all-zero tensor gives zero codes and the eps scale") {
    SKIP_WITHOUT_CUDA_DEVICE();
    Tensor zeros = Tensor::zeros({130, 260}, DType::F32);
    for (Granularity g : kGranularities) {
      CAPTURE(granularity_name(g));
      Float8Tensor expected = quantize(zeros, g, Format::E4M3);
      check_same(quantize(zeros.to(kFp8Gpu), g, Format::E4M3), expected);
      check_same(quantize_transposed(zeros.to(kFp8Gpu), g, Format::E4M3),
                 quantize_transposed(zeros, g, Format::E4M3));
      CHECK(std::isfinite(expected.scales.data<float>()[0]));
    }
  }

  TEST_CASE("gpu: fp8 quantize_with_scales saturates like the CPU") {
    SKIP_WITHOUT_CUDA_DEVICE();
    // Fixed scales far too large for the data: most products pass fp8_max and saturate to ±max.
    Tensor x = quantize_input(257, 384, 3);
    for (Granularity g : kGranularities) {
      Tensor scales = Tensor::empty(scales_shape(g, 257, 384), DType::F32);
      for (int64_t i = 0; i < scales.numel(); ++i) {
        scales.data<float>()[i] = std::ldexp(1.0f, static_cast<int>(i % 11) + 8);
      }
      for (Format f : kFormats) {
        for (DType dtype : {DType::F32, DType::BF16}) {
          CAPTURE(granularity_name(g));
          CAPTURE(format_name(f));
          CAPTURE(dtype_name(dtype));
          Inputs in = inputs(x, dtype);
          check_same(quantize_with_scales(in.device, scales.to(kFp8Gpu), g, f),
                     quantize_with_scales(in.host, scales, g, f));
        }
      }
    }
  }

  TEST_CASE("gpu: fp8 quantize_transposed matches the CPU bit for bit") {
    SKIP_WITHOUT_CUDA_DEVICE();
    for_each_quantize_case(4, [](const Inputs& in, Granularity g, Format f, bool pow2) {
      Float8Tensor q = quantize_transposed(in.device, g, f, pow2);
      CHECK(q.rows() == in.host.size(1));
      CHECK(q.cols() == in.host.size(0));
      check_same(q, quantize(transpose_2d(in.host), g, f, pow2));
    });
  }

  TEST_CASE("gpu: fp8 dequantize and the transposes match the CPU bit for bit") {
    SKIP_WITHOUT_CUDA_DEVICE();
    Tensor x = quantize_input(300, 200, 5);
    for (Granularity g : kGranularities) {
      for (Format f : kFormats) {
        CAPTURE(granularity_name(g));
        CAPTURE(format_name(f));
        Float8Tensor cpu = quantize(x, g, f);
        CHECK_SAME_BYTES(dequantize(to_gpu(cpu)).to(Device::cpu()), dequantize(cpu));
      }
    }
    CHECK_SAME_BYTES(transpose_2d(x.to(kFp8Gpu)).to(Device::cpu()), transpose_2d(x));
    // bf16 is transposed as bits: the expectation is the host's bf16 tensor, transposed by hand.
    Tensor bf16 = cast(x, DType::BF16);
    Tensor bf16_transposed = Tensor::empty({200, 300}, DType::BF16);
    for (int64_t r = 0; r < 300; ++r) {
      for (int64_t c = 0; c < 200; ++c) {
        bf16_transposed.data<bf16_t>()[c * 300 + r] = bf16.data<bf16_t>()[r * 200 + c];
      }
    }
    CHECK_SAME_BYTES(transpose_2d(bf16.to(kFp8Gpu)).to(Device::cpu()), bf16_transposed);
    Float8Tensor tensorwise = quantize(x, Granularity::Tensorwise, Format::E4M3);
    check_same(transpose_tensorwise(to_gpu(tensorwise)), transpose_tensorwise(tensorwise));
    // Dims that are multiples of 16 take the 16-byte tile kernel; 208 × 336 has partial tiles.
    for (Shape shape : {Shape{208, 336}, Shape{512, 1024}}) {
      Float8Tensor q =
          quantize(quantize_input(shape[0], shape[1], 6), Granularity::Tensorwise, Format::E5M2);
      check_same(transpose_tensorwise(to_gpu(q)), transpose_tensorwise(q));
    }
  }

  TEST_CASE("gpu: fp8 scaled GEMM through cuBLASLt matches the emulation for every recipe GEMM") {
    SKIP_WITHOUT_CUDA_DEVICE();
    for (const GemmCase& c : kGemmCases) {
      for (const auto& shape : kGemmShapes) {
        const int64_t m = shape[0], n = shape[1], k = shape[2];
        const std::string name = c.name;
        CAPTURE(name);
        CAPTURE(m);
        CAPTURE(n);
        CAPTURE(k);
        GemmOperands cpu = gemm_operands(c, m, n, k);
        Float8Tensor a = to_gpu(cpu.a), b = to_gpu(cpu.b);
        Tensor expected = Tensor::empty({m, n}, DType::F32);
        scaled_gemm(cpu.a, cpu.b, expected, false);

        // Default (promoted) accumulation: the products are exact, but Hopper's FP8 MMA adds
        // them in an accumulator of about 14 significant bits (DeepSeek-V3 §3.3.2, measured on
        // H800); cuBLASLt promotes those partial sums into fp32 every few k-steps, so the error
        // is about 2⁻¹⁴ of each partial sum whatever K is. Measured on H100: 0.9e-4 – 1.1e-4 for
        // every case and both shapes. 5e-4 leaves room and still catches a wrong scale or scale
        // layout, which is an O(1) error. (The fp32 emulation's own error is ~1e-7.)
        Tensor out = Tensor::empty({m, n}, DType::F32, kFp8Gpu);
        scaled_gemm(a, b, out, false);
        const double promoted = relative_l2_error(out, expected);
        CHECK_MESSAGE(promoted <= 5e-4, "relative L2 error ", promoted);

        // Fast accumulation never promotes: the narrow accumulator carries the whole K, so the
        // error grows with K (measured 2.3e-4 at K 384, 4.6e-4 at K 1024); 2e-3 bounds it for
        // these K. Block scaling promotes after every 128-wide block anyway and ignores the flag.
        Tensor fast = Tensor::empty({m, n}, DType::F32, kFp8Gpu);
        scaled_gemm(a, b, fast, false, true);
        const double fast_error = relative_l2_error(fast, expected);
        CHECK_MESSAGE(fast_error <= 2e-3, "relative L2 error ", fast_error);

        // bf16 output: one rounding to 8 significant bits per element (relative ≤ 2⁻⁹, about
        // 1.7e-3 in L2 as measured) on top of the above; 1e-2 bounds it.
        Tensor out_bf16 = Tensor::empty({m, n}, DType::BF16, kFp8Gpu);
        scaled_gemm(a, b, out_bf16, false);
        const double bf16_error = relative_l2_error(out_bf16, expected);
        CHECK_MESSAGE(bf16_error <= 1e-2, "relative L2 error ", bf16_error);

        // accumulate: D = C + A·Bᵀ onto a random output (beta = 1, C = D): the bound of the
        // promoted accumulation (measured 4e-5 – 7e-5: the random C adds norm, not error).
        Tensor initial = random_tensor({m, n}, DType::F32, 23);
        Tensor expected_sum = initial.clone();
        scaled_gemm(cpu.a, cpu.b, expected_sum, true);
        Tensor sum = initial.to(kFp8Gpu);
        scaled_gemm(a, b, sum, true);
        const double sum_error = relative_l2_error(sum, expected_sum);
        CHECK_MESSAGE(sum_error <= 5e-4, "relative L2 error ", sum_error);
      }
    }
  }

  TEST_CASE("gpu: fp8 quantize then GEMM on the GPU equals the same on the CPU") {
    SKIP_WITHOUT_CUDA_DEVICE();
    // The blockwise recipe end to end from bf16 operands: the output GEMM, and the weight
    // gradient dw = dyᵀ · x from backward's transposed copies (K = T = 272: a partial last K
    // block). Quantization is bit-identical, so only the GEMM's accumulation differs: the bound
    // of the promoted accumulation above.
    const int64_t t = 272, in = 384, out = 528;
    Tensor x = bf16_values(random_tensor({t, in}, DType::F32, 31));
    Tensor w = bf16_values(random_tensor({out, in}, DType::F32, 32, 0.05));
    Tensor dy = bf16_values(random_tensor({t, out}, DType::F32, 33, 1e-3));
    Tensor x_gpu = cast(x, DType::BF16).to(kFp8Gpu), w_gpu = cast(w, DType::BF16).to(kFp8Gpu);
    Tensor dy_gpu = cast(dy, DType::BF16).to(kFp8Gpu);
    const Recipe recipe = make_recipe(RecipeKind::Blockwise);
    const GemmScaling& s = recipe.grad_weight;
    Tensor expected = Tensor::empty({out, in}, DType::F32);
    scaled_gemm(quantize_transposed(dy, s.a.granularity, s.a.format),
                quantize_transposed(x, s.b.granularity, s.b.format), expected, false);
    Tensor actual = Tensor::empty({out, in}, DType::F32, kFp8Gpu);
    scaled_gemm(quantize_transposed(dy_gpu, s.a.granularity, s.a.format),
                quantize_transposed(x_gpu, s.b.granularity, s.b.format), actual, false);
    const double dw_error = relative_l2_error(actual, expected);
    CHECK_MESSAGE(dw_error <= 5e-4, "relative L2 error ", dw_error);

    const GemmScaling& o = recipe.output;
    Tensor y_expected = Tensor::empty({t, out}, DType::F32);
    scaled_gemm(quantize(x, o.a.granularity, o.a.format), quantize(w, o.b.granularity, o.b.format),
                y_expected, false);
    Tensor y = Tensor::empty({t, out}, DType::F32, kFp8Gpu);
    scaled_gemm(quantize(x_gpu, o.a.granularity, o.a.format),
                quantize(w_gpu, o.b.granularity, o.b.format), y, false);
    const double y_error = relative_l2_error(y, y_expected);
    CHECK_MESSAGE(y_error <= 5e-4, "relative L2 error ", y_error);
  }

#if TITAN_CUDA  // gemm_scales.cu is built with the CUDA backend only
  TEST_CASE("gpu: cuBLASLt's dequant scales are our scales' reciprocals in its layouts") {
    SKIP_WITHOUT_CUDA_DEVICE();
    // 130 rows (two partial 128-row tiles' worth, not a multiple of 4) × 300 columns (three K
    // blocks, the last partial): every layout of gemm_scales.h has padding.
    const int64_t rows = 130, cols = 300, k_blocks = 3, row_tiles = 2;
    const Tensor x = quantize_input(rows, cols, 61).to(kFp8Gpu);
    auto up4 = [](int64_t n) { return (n + 3) / 4 * 4; };
    for (Granularity g : kGranularities) {
      CAPTURE(granularity_name(g));
      const Float8Tensor q = quantize(x, g, Format::E4M3);
      const Tensor scales = q.scales.to(Device::cpu());
      const float* s = scales.data<float>();
      // The layouts of the table in fp8/cuda/gemm_scales.h, element by element.
      std::vector<float> expected;
      if (g == Granularity::Tensorwise || g == Granularity::Rowwise) {
        for (int64_t i = 0; i < scales.numel(); ++i) expected.push_back(1.0f / s[i]);
      } else if (g == Granularity::Block1x128) {  // [K blocks, rows↑4]; scales [rows, K blocks]
        for (int64_t kb = 0; kb < k_blocks; ++kb) {
          for (int64_t r = 0; r < up4(rows); ++r) {
            expected.push_back(r < rows ? 1.0f / s[r * k_blocks + kb] : 0.0f);
          }
        }
      } else {  // [row tiles, K blocks↑4]; scales [row tiles, K blocks]
        for (int64_t t = 0; t < row_tiles; ++t) {
          for (int64_t kb = 0; kb < up4(k_blocks); ++kb) {
            expected.push_back(kb < k_blocks ? 1.0f / s[t * k_blocks + kb] : 0.0f);
          }
        }
      }
      const Tensor actual = cublaslt_dequant_scales(q).to(Device::cpu());
      REQUIRE(actual.numel() == static_cast<int64_t>(expected.size()));
      CHECK(first_difference(actual, Tensor::from_vector(expected, {actual.numel()})) == "");
    }
  }
#endif

  TEST_CASE("gpu: fp8 scaled GEMM refuses dims that are not multiples of 16 with the shape") {
    SKIP_WITHOUT_CUDA_DEVICE();
    Float8Tensor a = to_gpu(
        quantize(random_tensor({20, 64}, DType::F32, 41), Granularity::Tensorwise, Format::E4M3));
    Float8Tensor b = to_gpu(
        quantize(random_tensor({32, 64}, DType::F32, 42), Granularity::Tensorwise, Format::E4M3));
    Tensor out = Tensor::empty({20, 32}, DType::F32, kFp8Gpu);
    CHECK_THROWS_WITH_AS(
        scaled_gemm(a, b, out, false),
        doctest::Contains("A [20, 64] · B [32, 64]ᵀ needs M, N and K multiples of 16"), InputError);
  }

}  // TEST_SUITE
