// The FP8 linear's three GEMMs (parallel/float8_linear.h) on CUDA against the same Float8Gemms
// on the CPU, for every recipe: bf16 x, w, dy on the GPU as in training, bf16 y and dx, dw
// accumulated in f32; the CPU oracle runs on f32 copies of the same bf16 values.
//
// Quantization is bit-identical on both sides (test_fp8_cuda.cpp), so what differs is the
// GEMM alone: Hopper's FP8 accumulator (about 14 significant bits, promoted to fp32 every few
// k-steps, never under the output GEMM's fast accumulation) and, for y and dx, one rounding to
// bf16. Outputs are poisoned with NaN before the GPU writes them, and dw starts from random
// values of the update's size, so an unwritten element or an assignment instead of += fails.
#include <doctest/doctest.h>

#include <limits>
#include <string>
#include <vector>

#include "core/cast.h"
#include "core/check.h"
#include "fp8/recipe.h"
#include "parallel/float8_linear.h"
#include "support/gpu.h"
#include "support/tensor_testing.h"

using namespace titan;
using titan::testing::bf16_values;
using titan::testing::random_tensor;
using titan::testing::relative_l2_error;

namespace {

const Device kGpu = Device::cuda(0);

// T, in, out: multiples of 16 (cuBLASLt FP8) with partial 128-blocks along every contraction
// axis but the output GEMM's — in = 384 (output), out = 528 (grad_input), T = 272 (grad_weight)
// — and partial 128x128 weight tiles.
constexpr int64_t kTokens = 272, kIn = 384, kOut = 528;

// y and dx in bf16: the FP8 GEMM's own error (measured on H100 for these recipe GEMMs: 1e-4
// promoted, 2.3e-4 – 4.6e-4 with fast accumulation at K 384 – 1024) plus one rounding of each
// output to 8 significant bits, at most 2⁻⁹ relative per element and about 1.7e-3 in L2 as
// measured. 1e-2 bounds the sum with room and still catches a wrong scale, layout or operand
// (an O(1) error).
constexpr double kBf16OutTolerance = 1e-2;
// dw in f32: the promoted accumulator's 1e-4 (measured 0.9e-4 – 1.1e-4 for every scale mode);
// rowwise_with_gw_hp's bf16 GEMM differs from OpenBLAS by summation order only (~1e-7).
constexpr double kF32OutTolerance = 5e-4;

Tensor poisoned(const Shape& shape, DType dtype) {
  Tensor t = Tensor::empty(shape, dtype, kGpu);
  t.fill_(std::numeric_limits<double>::quiet_NaN());
  return t;
}

// A tensor in bf16 on the GPU and the f32 values it holds on the host.
struct Operand {
  Tensor gpu, cpu;
};
Operand operand(const Shape& shape, uint64_t seed, double scale) {
  Tensor values = bf16_values(random_tensor(shape, DType::F32, seed, scale));
  return {cast(values, DType::BF16).to(kGpu), values};
}

// Stands in for the all-reduce (max) over tp, where another rank holds a value 4x larger than
// this one's: the scale must come from the reduced amax on both devices. Records the devices
// of the amaxes it sees.
struct FakeTpReduction {
  std::vector<Device> seen;
  void operator()(const Tensor& amax) {
    seen.push_back(amax.device());
    Tensor host = amax.to(Device::cpu());
    host.data<float>()[0] *= 4.0f;
    amax.copy_from(host.to(amax.device()));
  }
};

struct RecipeCase {
  const char* recipe;
  bool tp_reduction;  // tensorwise amaxes go through FakeTpReduction
};

const RecipeCase kCases[] = {{"tensorwise", false},
                             {"tensorwise", true},
                             {"rowwise", false},
                             {"rowwise_with_gw_hp", false},
                             {"blockwise", false}};

}  // namespace

TEST_SUITE("gpu") {
  TEST_CASE("gpu: the FP8 linear's GEMMs on bf16 CUDA tensors match the CPU for every recipe") {
    SKIP_WITHOUT_CUDA_DEVICE();
    const Operand x = operand({kTokens, kIn}, 51, 1.0);
    const Operand w = operand({kOut, kIn}, 52, 0.05);
    const Operand dy = operand({kTokens, kOut}, 53, 1e-3);
    // dyᵀ·x has elements of about 1e-3 · 0.58 · √272 ≈ 1e-2; the initial dw is of that size,
    // so the comparison sees the update, not only the starting values.
    const Tensor dw_initial = random_tensor({kOut, kIn}, DType::F32, 54, 1e-2);

    for (const RecipeCase& c : kCases) {
      const std::string recipe = c.recipe;
      CAPTURE(recipe);
      CAPTURE(c.tp_reduction);
      auto reduction = std::make_shared<FakeTpReduction>();
      std::function<void(const Tensor&)> reduce_amax;
      if (c.tp_reduction) reduce_amax = [reduction](const Tensor& amax) { (*reduction)(amax); };
      parallel::Float8Gemms gemms(fp8::recipe_by_name(recipe), reduce_amax);

      Tensor y_expected = Tensor::empty({kTokens, kOut}, DType::F32);
      Tensor dx_expected = Tensor::empty({kTokens, kIn}, DType::F32);
      Tensor dw_expected = dw_initial.clone();
      gemms.output(y_expected, x.cpu, w.cpu);
      gemms.grad_input(dx_expected, dy.cpu, w.cpu);
      gemms.grad_weight(dw_expected, dy.cpu, x.cpu);
      const size_t cpu_reductions = reduction->seen.size();

      Tensor y = poisoned({kTokens, kOut}, DType::BF16);
      Tensor dx = poisoned({kTokens, kIn}, DType::BF16);
      Tensor dw = dw_initial.to(kGpu);
      gemms.output(y, x.gpu, w.gpu);
      gemms.grad_input(dx, dy.gpu, w.gpu);
      gemms.grad_weight(dw, dy.gpu, x.gpu);

      const double y_error = relative_l2_error(y, y_expected);
      const double dx_error = relative_l2_error(dx, dx_expected);
      const double dw_error = relative_l2_error(dw, dw_expected);
      // doctest prints a `const char*` argument as a pointer: pass strings.
      MESSAGE(recipe, std::string(c.tp_reduction ? " (tp-reduced amax)" : ""),
              ": relative L2 error y ", y_error, ", dx ", dx_error, ", dw ", dw_error);
      CHECK_MESSAGE(y_error <= kBf16OutTolerance, "y: relative L2 error ", y_error);
      CHECK_MESSAGE(dx_error <= kBf16OutTolerance, "dx: relative L2 error ", dx_error);
      CHECK_MESSAGE(dw_error <= kF32OutTolerance, "dw: relative L2 error ", dw_error);

      if (c.tp_reduction) {
        // x, w (output); dy, w (grad_input); dy, x (grad_weight): six tensorwise amaxes per
        // device, the GPU's on the GPU.
        CHECK(cpu_reductions == 6);
        REQUIRE(reduction->seen.size() == 12);
        for (size_t i = 0; i < 6; ++i) CHECK(reduction->seen[i] == Device::cpu());
        for (size_t i = 6; i < 12; ++i) CHECK(reduction->seen[i] == kGpu);
      }
    }
  }

  TEST_CASE("gpu: the FP8 linear refuses FSDP's float8 weight cache for a CUDA weight") {
    SKIP_WITHOUT_CUDA_DEVICE();
    parallel::Float8Gemms gemms(fp8::recipe_by_name("tensorwise"), {},
                                std::make_shared<parallel::Float8WeightCache>());
    const Operand x = operand({32, 64}, 61, 1.0);
    const Operand w = operand({48, 64}, 62, 0.05);
    Tensor y = poisoned({32, 48}, DType::BF16);
    CHECK_THROWS_WITH_AS(gemms.output(y, x.gpu, w.gpu),
                         doctest::Contains("float8 all-gather runs on the CPU only"), InputError);
  }
}  // TEST_SUITE
