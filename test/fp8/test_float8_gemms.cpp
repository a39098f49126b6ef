// The FP8 LinearGemms against the fp8/ pieces it is made of: each GEMM quantizes its operands
// along its own contraction axis, from the high-precision tensors
// (docs/architecture.md#decision-8). In particular backward's wᵀ is quantized from w itself, not
// transposed from forward's FP8 copy of w — for rowwise scaling those differ, which is what this
// test can tell apart.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>

#include "core/rng.h"
#include "fp8/float8_all_gather.h"
#include "fp8/float8_linear.h"
#include "fp8/scaled_gemm.h"

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

TEST_SUITE("fast") {
  TEST_CASE("FP8 linear GEMMs quantize each operand along its own contraction axis") {
    const int64_t T = 32, in = 48, out = 64;
    Tensor x = random_f32("x", T, in), w = random_f32("w", out, in), dy = random_f32("dy", T, out);
    // Rows of w spanning 2⁻¹¹ .. 1: quantized by row every value is a normal e4m3 number, but
    // by column (as grad_input needs) the small rows fall into e4m3's subnormals, where rounding
    // an already-rounded value can land elsewhere than rounding the original.
    for (int64_t r = 0; r < out; ++r)
      for (int64_t c = 0; c < in; ++c)
        w.data<float>()[r * in + c] *= std::ldexp(1.0f, -static_cast<int>(r % 12));
    const fp8::Recipe recipe = fp8::make_recipe(fp8::RecipeKind::Rowwise);
    fp8::Float8Gemms gemms(recipe, nullptr);
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
    const fp8::Recipe recipe = fp8::make_recipe(fp8::RecipeKind::Tensorwise);
    // Another rank of the tp group holds a value 4x larger than any here.
    struct Reduce final : fp8::AmaxReduction {
      int calls = 0;
      void reduce_max(const Tensor& amax) override {
        ++calls;
        amax.data<float>()[0] *= 4.0f;
      }
    };
    auto reduce = std::make_shared<Reduce>();
    fp8::Float8Gemms gemms(recipe, reduce);
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
    CHECK(reduce->calls == 2);
    CHECK(same(dw, expected));
  }

  TEST_CASE("rowwise_with_gw_hp keeps the weight gradient in high precision") {
    const fp8::Recipe recipe = fp8::make_recipe(fp8::RecipeKind::RowwiseWithGwHp);
    CHECK(recipe.grad_weight.high_precision);
    CHECK_FALSE(recipe.output.high_precision);
    CHECK_FALSE(recipe.grad_input.high_precision);
    CHECK(fp8::make_recipe(fp8::RecipeKind::Tensorwise).grad_input.a.format == fp8::Format::E5M2);
    CHECK(fp8::make_recipe(fp8::RecipeKind::Blockwise).output.b.granularity ==
          fp8::Granularity::Block128x128);
  }

  TEST_CASE("a recipe is parsed once from its config name and names float8.recipe otherwise") {
    for (fp8::RecipeKind kind : fp8::kRecipeKinds) {
      CAPTURE(std::string(fp8::recipe_name(kind)));
      CHECK(fp8::kRecipeNames.parse(fp8::recipe_name(kind), "float8.recipe") == kind);
      CHECK(fp8::make_recipe(kind).name() == fp8::recipe_name(kind));
    }
    CHECK(fp8::recipe_name(fp8::RecipeKind::RowwiseWithGwHp) == "rowwise_with_gw_hp");
    CHECK_THROWS_WITH_AS(fp8::kRecipeNames.parse("mxfp8", "float8.recipe"),
                         doctest::Contains("float8.recipe: unknown recipe 'mxfp8'"), InputError);
    CHECK_THROWS_AS(fp8::kRecipeNames.parse("Rowwise", "float8.recipe"), InputError);
  }

  TEST_CASE("every recipe uses fast accumulation for the output GEMM only as torchao does") {
    for (fp8::RecipeKind kind : fp8::kRecipeKinds) {
      CAPTURE(std::string(fp8::recipe_name(kind)));
      const fp8::Recipe r = fp8::make_recipe(kind);
      CHECK(r.output.fast_accumulation);
      CHECK_FALSE(r.grad_input.fast_accumulation);
      CHECK_FALSE(r.grad_weight.fast_accumulation);
    }
  }

  TEST_CASE("FSDP's float8 all-gather codec: shards encoded under the whole weight's scale") {
    // A weight [out, in] in FSDP's two shards of R rows, the second with 3 zero-padded rows.
    // Each rank's codec learns the other shard's amax through its shard group's reduction,
    // stood in for here by the other shard's amax itself.
    constexpr int64_t R = 21, out = 2 * R - 3, in = 32, T = 16;
    const Tensor w = random_f32("w", out, in);
    Tensor shards[2] = {Tensor::zeros({R, in}, DType::F32), Tensor::zeros({R, in}, DType::F32)};
    shards[0].copy_from(w.narrow(0, 0, R));
    shards[1].narrow(0, 0, out - R).copy_from(w.narrow(0, R, out - R));
    struct OtherShard final : fp8::AmaxReduction {
      float other = 0;
      int calls = 0;
      void reduce_max(const Tensor& amax) override {
        ++calls;
        amax.data<float>()[0] = std::max(amax.data<float>()[0], other);
      }
    };
    model::Parameter param;
    param.name = "layers.0.feed_forward.w2.weight";
    param.shape = {out, in};
    auto cache = std::make_shared<fp8::Float8WeightCache>();
    Tensor gathered = Tensor::empty({2 * R * in}, DType::E4M3);
    std::shared_ptr<fp8::Float8AllGatherCodec> rank0;
    for (int rank = 0; rank < 2; ++rank) {
      auto reduction = std::make_shared<OtherShard>();
      reduction->other =
          fp8::compute_amax(shards[1 - rank].view({1, R * in}), fp8::Granularity::Tensorwise)
              .data<float>()[0];
      auto codec = std::make_shared<fp8::Float8AllGatherCodec>(
          reduction, rank == 0 ? cache : std::make_shared<fp8::Float8WeightCache>());
      CHECK(codec->wire_dtype() == DType::E4M3);
      CHECK_THROWS_WITH_AS(codec->encode(param, shards[rank], gathered.narrow(0, 0, R * in)),
                           doctest::Contains("no scale"), Error);
      codec->update({{&param, shards[rank]}});
      CHECK(reduction->calls == 1);
      codec->encode(param, shards[rank], gathered.narrow(0, rank * R * in, R * in));
      if (rank == 0) rank0 = codec;
    }
    const Tensor value =
        rank0->decode(param, gathered.narrow(0, 0, out * in).view({out, in}), DType::F32);

    // The gathered codes are what quantizing the whole weight gives; the value what they stand for.
    const fp8::Float8Tensor whole =
        fp8::quantize(w, fp8::Granularity::Tensorwise, fp8::Format::E4M3);
    CHECK(rank0->scale(param).data<float>()[0] == whole.scales.data<float>()[0]);
    const fp8::Float8Tensor* codes = cache->find(value);
    REQUIRE(codes != nullptr);
    CHECK(std::memcmp(codes->codes.raw_data(), whole.codes.raw_data(), whole.codes.nbytes()) == 0);
    CHECK(same(value, fp8::dequantize(whole)));

    // The FP8 linear computes from the gathered codes: output and grad_input as from the whole
    // weight quantized here.
    const fp8::Recipe recipe = fp8::make_recipe(fp8::RecipeKind::Tensorwise);
    fp8::Float8Gemms gemms(recipe, nullptr, nullptr, cache);
    const Tensor x = random_f32("x", T, in), dy = random_f32("dy", T, out);
    Tensor y = Tensor::empty({T, out}, DType::F32),
           expected_y = Tensor::empty({T, out}, DType::F32);
    gemms.output(y, x, value);
    fp8::scaled_gemm(fp8::quantize(x, fp8::Granularity::Tensorwise, fp8::Format::E4M3), whole,
                     expected_y, false);
    CHECK(same(y, expected_y));
    Tensor dx = Tensor::empty({T, in}, DType::F32),
           expected_dx = Tensor::empty({T, in}, DType::F32);
    gemms.grad_input(dx, dy, value);
    fp8::scaled_gemm(fp8::quantize(dy, fp8::Granularity::Tensorwise, fp8::Format::E5M2),
                     fp8::transpose_tensorwise(whole), expected_dx, false);
    CHECK(same(dx, expected_dx));

    // FSDP frees the weight: the codes go with it, and a weight the cache does not hold is a bug.
    rank0->release(param, value);
    CHECK(cache->find(value) == nullptr);
    CHECK_THROWS_WITH_AS(gemms.output(y, x, value), doctest::Contains("not gathered as e4m3"),
                         Error);
  }
}
