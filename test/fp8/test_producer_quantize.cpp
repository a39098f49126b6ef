// The producers that quantize their own output (fp8/producer_quantize.h) and the FP8 linear's
// fusion of them (fp8/float8_producer_fusion.h), on the CPU: each gives the op's bits and the
// very operands the FP8 linear would prepare from that output, and a model whose blocks take
// the fused path trains bit for bit as one that does not, in every recipe.
#include <doctest/doctest.h>

#include <memory>
#include <string>
#include <vector>

#include "core/rng.h"
#include "fp8/float8_linear.h"
#include "fp8/producer_quantize.h"
#include "model/activation_checkpoint.h"
#include "model/ops/rmsnorm.h"
#include "model/ops/swiglu.h"
#include "model/transformer.h"
#include "support/small_model.h"
#include "support/tensor_testing.h"

using namespace titan;
using titan::testing::bitwise_equal;

namespace {

Tensor random_f32(const char* name, Shape shape, double scale = 1.0) {
  Tensor t = Tensor::empty(shape, DType::F32);
  CounterRng rng(9, name);
  for (int64_t i = 0; i < t.numel(); ++i) {
    t.data<float>()[i] = static_cast<float>(rng.normal(static_cast<uint64_t>(i)) * scale);
  }
  return t;
}

// A stand-in for the tp group's amax reduction: another rank holds twice this one's amax. A
// fused path that skipped the reduction, or ran it twice, gets other scales.
class DoublingReduction final : public fp8::AmaxReduction {
 public:
  void reduce_max(const Tensor& amax) override {
    for (int64_t i = 0; i < amax.numel(); ++i) amax.data<float>()[i] *= 2.0f;
    ++calls;
  }
  int calls = 0;
};

bool same_operand(const model::GemmOperand& a, const model::GemmOperand& b) {
  auto same = [](const Tensor& x, const Tensor& y) {
    return x.defined() == y.defined() && (!x.defined() || bitwise_equal(x, y));
  };
  return a.scaling == b.scaling && a.row_blocks == b.row_blocks && same(a.values, b.values) &&
         same(a.row_scales, b.row_scales) && same(a.shared_scales, b.shared_scales);
}

// Every operand the fusion produced is what the linear prepares from the same tensor.
void check_produced(const model::ProducedOperands& produced, fp8::Float8Gemms& gemms,
                    const Tensor& source, bool forward) {
  CHECK(produced.source.raw_data() == source.raw_data());
  if (forward) {
    REQUIRE(produced.output_a.values.defined());
    CHECK(same_operand(produced.output_a, gemms.prepare_a(model::GemmKind::Output, source)));
    return;
  }
  REQUIRE(produced.grad_input_a.values.defined());
  CHECK(same_operand(produced.grad_input_a, gemms.prepare_a(model::GemmKind::GradInput, source)));
  // dyᵀ comes from the same pass exactly when grad_weight scales it as grad_input scales dy.
  const fp8::Recipe& r = gemms.recipe();
  CHECK(produced.grad_weight_a.values.defined() == (r.kind == fp8::RecipeKind::Tensorwise));
  if (produced.grad_weight_a.values.defined()) {
    CHECK(
        same_operand(produced.grad_weight_a, gemms.prepare_a(model::GemmKind::GradWeight, source)));
  }
}

}  // namespace

TEST_SUITE("fast") {
  TEST_CASE("fused producers: the op bits and the operands the FP8 linear would prepare") {
    const int64_t T = 48, D = 160, F = 144;  // 1×128 blocks partial; rows and columns uneven
    const double eps = 1e-5;
    for (fp8::RecipeKind kind : fp8::kRecipeKinds) {
      for (bool reduced : {false, true}) {
        CAPTURE(fp8::recipe_name(kind));
        CAPTURE(reduced);
        auto reduction = std::make_shared<DoublingReduction>();
        fp8::Float8Gemms gemms(fp8::make_recipe(kind), reduced ? reduction : nullptr);
        gemms.set_fuse_on_cpu(true);
        model::ProducerFusion* fusion = gemms.producer_fusion(Tensor::empty({1, 1}, DType::F32));
        REQUIRE(fusion != nullptr);
        const Tensor x = random_f32("x", {T, D}, 3.0), weight = random_f32("w", {D});
        const Tensor residual = random_f32("residual", {T, D});
        const Tensor h13 = random_f32("h13", {T, 2 * F}), dout = random_f32("dout", {T, F});

        // RMSNorm, then the residual add fused with it.
        Tensor y = Tensor::empty({T, D}, DType::F32), rstd = Tensor::empty({T}, DType::F32);
        model::ProducedOperands p = fusion->rmsnorm_forward(y, rstd, x, weight, eps);
        Tensor y_plain = Tensor::empty({T, D}, DType::F32), rstd_plain = rstd.clone();
        model::rmsnorm_forward(y_plain, rstd_plain, x, weight, eps);
        CHECK(bitwise_equal(y, y_plain));
        CHECK(bitwise_equal(rstd, rstd_plain));
        check_produced(p, gemms, y, true);

        Tensor h = x.clone(), h_plain = x.clone();
        p = fusion->add_rmsnorm_forward(y, rstd, h, residual, weight, eps);
        model::add_rmsnorm_forward(y_plain, rstd_plain, h_plain, residual, weight, eps);
        CHECK(bitwise_equal(h, h_plain));
        CHECK(bitwise_equal(y, y_plain));
        check_produced(p, gemms, y, true);

        // SwiGLU and dSwiGLU.
        Tensor g = Tensor::empty({T, F}, DType::F32), g_plain = g.clone();
        p = fusion->swiglu_forward(g, h13);
        model::swiglu_forward(g_plain, h13);
        CHECK(bitwise_equal(g, g_plain));
        check_produced(p, gemms, g, true);
        Tensor dh13 = Tensor::empty({T, 2 * F}, DType::F32), dh13_plain = dh13.clone();
        p = fusion->swiglu_backward(dh13, dout, h13);
        model::swiglu_backward(dh13_plain, dout, h13);
        CHECK(bitwise_equal(dh13, dh13_plain));
        check_produced(p, gemms, dh13, false);

        // The norm's backward with the residual's gradient.
        const Tensor dy = random_f32("dy", {T, D}), dresidual = random_f32("dres", {T, D});
        Tensor dx = Tensor::empty({T, D}, DType::F32), dx_plain = dx.clone();
        Tensor dweight = Tensor::zeros({D}, DType::F32), dweight_plain = dweight.clone();
        p = fusion->rmsnorm_backward_add(dx, dweight, dy, x, weight, rstd, dresidual);
        model::rmsnorm_backward_add(dx_plain, dweight_plain, dy, x, weight, rstd, dresidual);
        CHECK(bitwise_equal(dx, dx_plain));
        CHECK(bitwise_equal(dweight, dweight_plain));
        check_produced(p, gemms, dx, false);

        // An operand is found for its own tensor only (a tp-gathered one is prepared anew).
        CHECK(p.a_for(model::GemmKind::GradInput, dx) != nullptr);
        CHECK(p.a_for(model::GemmKind::GradInput, dx.clone()) == nullptr);
        CHECK(p.a_for(model::GemmKind::Output, dx) == nullptr);
        if (reduced && kind == fp8::RecipeKind::Tensorwise) CHECK(reduction->calls > 0);
      }
    }
  }

  TEST_CASE(
      "fused producers: a model trains bit for bit as without them in every recipe and AC mode") {
    testing::SmallModelDims dims;
    dims.n_layers = 2;
    const model::ModelArgs args = testing::small_model_args(dims);
    const Tensor tokens = testing::random_tokens(2, 16, args.vocab_size, 1);
    const Tensor targets = testing::random_tokens(2, 16, args.vocab_size, 2);
    for (fp8::RecipeKind kind : fp8::kRecipeKinds) {
      for (auto mode :
           {model::ActivationCheckpointMode::None, model::ActivationCheckpointMode::Full}) {
        CAPTURE(fp8::recipe_name(kind));
        CAPTURE(static_cast<int>(mode));
        std::vector<Tensor> grads[2];
        double losses[2] = {0, 0};
        int reductions[2] = {0, 0};
        for (int fused = 0; fused < 2; ++fused) {
          model::Transformer model(args, DType::F32);
          model.allocate();
          model.init_weights(11);
          model.set_activation_checkpoint(model::ActivationCheckpointPolicy::make(mode, "2", "o"));
          fp8::Float8Options options;
          options.enabled = true;
          options.recipe = kind;
          // A stand-in tp reduction, so that the tensorwise amaxes go through one.
          auto reduction = std::make_shared<DoublingReduction>();
          const fp8::Float8Conversion converted = fp8::convert_to_float8(model, options, reduction);
          REQUIRE(converted.converted.size() == 4 * static_cast<size_t>(args.n_layers));
          for (model::Linear* linear : model.linears()) {
            if (auto* gemms = dynamic_cast<fp8::Float8Gemms*>(&linear->gemms())) {
              gemms->set_fuse_on_cpu(fused == 1);
            }
          }
          for (int micro = 0; micro < 2; ++micro) {
            losses[fused] += model.forward(tokens, targets, 1.0 / 64);
            model.backward();
          }
          for (model::Parameter* p : model.parameters()) grads[fused].push_back(p->grad.clone());
          reductions[fused] = reduction->calls;
        }
        // The fused path ran: a tensorwise dy and dyᵀ share one reduced amax there, where the
        // linear reduces it once for each.
        if (kind == fp8::RecipeKind::Tensorwise) CHECK(reductions[1] < reductions[0]);
        CHECK(losses[1] == losses[0]);
        for (size_t i = 0; i < grads[0].size(); ++i) CHECK(bitwise_equal(grads[1][i], grads[0][i]));
      }
    }
  }
}
