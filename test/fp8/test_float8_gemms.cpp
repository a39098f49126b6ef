// The FP8 LinearGemms against the fp8/ pieces it is made of: each GEMM quantizes its operands
// along its own contraction axis, from the high-precision tensors (decision 8). In particular
// backward's wᵀ is quantized from w itself, not transposed from forward's FP8 copy of w — for
// rowwise scaling those differ, which is what this test can tell apart.
#include <doctest/doctest.h>

#include <cmath>

#include "core/rng.h"
#include "fp8/scaled_gemm.h"
#include "parallel/float8_linear.h"

using namespace titan;

namespace {

Tensor random_f32(const char* name, int64_t rows, int64_t cols) {
  Tensor t = Tensor::empty({rows, cols}, DType::F32);
  CounterRng rng(5, name);
  for (int64_t i = 0; i < rows * cols; ++i)
    t.data<float>()[i] = static_cast<float>(rng.normal(static_cast<uint64_t>(i)) * (1 + i % 7));
  return t;
}

bool same(const Tensor& a, const Tensor& b) {
  for (int64_t i = 0; i < a.numel(); ++i)
    if (a.data<float>()[i] != b.data<float>()[i]) return false;
  return true;
}

}  // namespace

TEST_SUITE("unit") {
  TEST_CASE("FP8 linear GEMMs quantize each operand along its own contraction axis") {
    const int64_t T = 32, in = 48, out = 64;
    Tensor x = random_f32("x", T, in), w = random_f32("w", out, in), dy = random_f32("dy", T, out);
    // Rows of w spanning 2⁻¹¹ .. 1: quantized by row every value is a normal e4m3 number, but
    // by column (as grad_input needs) the small rows fall into e4m3's subnormals, where rounding
    // an already-rounded value can land elsewhere than rounding the original.
    for (int64_t r = 0; r < out; ++r)
      for (int64_t c = 0; c < in; ++c)
        w.data<float>()[r * in + c] *= std::ldexp(1.0f, -static_cast<int>(r % 12));
    const fp8::Recipe recipe = fp8::recipe_by_name("rowwise");
    parallel::Float8Gemms gemms(recipe, {});
    auto q = [](const Tensor& t, const fp8::OperandScaling& s) {
      return fp8::quantize(t, s.granularity, s.format, s.power_of_two);
    };

    Tensor y = Tensor::empty({T, out}, DType::F32),
           expected_y = Tensor::empty({T, out}, DType::F32);
    gemms.output(y, x, w);
    fp8::scaled_gemm(q(x, recipe.output.a), q(w, recipe.output.b), expected_y, false);
    CHECK(same(y, expected_y));

    Tensor dx = Tensor::empty({T, in}, DType::F32),
           expected_dx = Tensor::empty({T, in}, DType::F32);
    gemms.grad_input(dx, dy, w);
    fp8::scaled_gemm(q(dy, recipe.grad_input.a), q(fp8::transpose_2d(w), recipe.grad_input.b),
                     expected_dx, false);
    CHECK(same(dx, expected_dx));
    // The shortcut — forward's row-scaled w, transposed — gives a different result.
    Tensor w_from_forward = fp8::transpose_2d(fp8::dequantize(q(w, recipe.output.b)));
    Tensor shortcut = Tensor::empty({T, in}, DType::F32);
    fp8::scaled_gemm(q(dy, recipe.grad_input.a), q(w_from_forward, recipe.grad_input.b), shortcut,
                     false);
    CHECK_FALSE(same(dx, shortcut));

    Tensor dw = Tensor::zeros({out, in}, DType::F32),
           expected_dw = Tensor::zeros({out, in}, DType::F32);
    gemms.grad_weight(dw, dy, x);
    fp8::scaled_gemm(q(fp8::transpose_2d(dy), recipe.grad_weight.a),
                     q(fp8::transpose_2d(x), recipe.grad_weight.b), expected_dw, true);
    CHECK(same(dw, expected_dw));
  }

  TEST_CASE("a tp-reduced tensorwise amax scales backward's transposed operands") {
    // With a reduction the transposed operands are quantized untransposed and their codes
    // byte-transposed; that must equal quantizing the transposed tensor with the reduced scale.
    const int64_t T = 32, in = 48, out = 64;
    Tensor x = random_f32("x", T, in), dy = random_f32("dy", T, out);
    const fp8::Recipe recipe = fp8::recipe_by_name("tensorwise");
    int reductions = 0;
    // Another rank of the tp group holds a value 4x larger than any here.
    auto reduce = [&reductions](const Tensor& amax) {
      ++reductions;
      amax.data<float>()[0] *= 4.0f;
    };
    parallel::Float8Gemms gemms(recipe, reduce);
    auto q_reduced = [](const Tensor& t, const fp8::OperandScaling& s) {
      Tensor amax = fp8::compute_amax(t, s.granularity);
      amax.data<float>()[0] *= 4.0f;
      return fp8::quantize_with_scales(t, fp8::scales_from_amax(amax, s.format, s.power_of_two),
                                       s.granularity, s.format);
    };
    Tensor dw = Tensor::zeros({out, in}, DType::F32),
           expected = Tensor::zeros({out, in}, DType::F32);
    gemms.grad_weight(dw, dy, x);
    fp8::scaled_gemm(q_reduced(fp8::transpose_2d(dy), recipe.grad_weight.a),
                     q_reduced(fp8::transpose_2d(x), recipe.grad_weight.b), expected, true);
    CHECK(reductions == 2);
    CHECK(same(dw, expected));
  }

  TEST_CASE("rowwise_with_gw_hp keeps the weight gradient in high precision") {
    const fp8::Recipe recipe = fp8::recipe_by_name("rowwise_with_gw_hp");
    CHECK(recipe.grad_weight.high_precision);
    CHECK_FALSE(recipe.output.high_precision);
    CHECK_FALSE(recipe.grad_input.high_precision);
    CHECK(fp8::recipe_by_name("tensorwise").grad_input.a.format == fp8::Format::E5M2);
    CHECK(fp8::recipe_by_name("blockwise").output.b.granularity == fp8::Granularity::Block128x128);
    CHECK_THROWS_AS(fp8::recipe_by_name("mxfp8"), InputError);
  }

  TEST_CASE("every recipe uses fast accumulation for the output GEMM only as torchao does") {
    for (const char* name : {"tensorwise", "rowwise", "rowwise_with_gw_hp", "blockwise"}) {
      CAPTURE(name);
      const fp8::Recipe r = fp8::recipe_by_name(name);
      CHECK(r.output.fast_accumulation);
      CHECK_FALSE(r.grad_input.fast_accumulation);
      CHECK_FALSE(r.grad_weight.fast_accumulation);
    }
  }
}
