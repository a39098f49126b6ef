// The whole model's gradient against finite differences of its loss, on a tiny config with
// grouped-query attention: every parameter tensor, a spread of its elements, f64 and f32.
#include <doctest/doctest.h>

#include "core/cast.h"
#include "model/transformer.h"
#include "support/gradcheck.h"
#include "support/small_model.h"

using namespace titan;
using namespace titan::model;

namespace {

// Small enough for finite differences of every parameter.
ModelArgs tiny_args() {
  return testing::small_model_args(
      {.dim = 16, .n_layers = 2, .n_heads = 4, .n_kv_heads = 2, .ffn_dim = 24, .vocab_size = 32});
}

}  // namespace

TEST_SUITE("fast") {
  TEST_CASE("whole model: every parameter's gradient matches finite differences of the loss") {
    const int64_t B = 2, S = 6;
    const ModelArgs args = tiny_args();
    const Tensor tokens = testing::random_tokens(B, S, args.vocab_size, 1);
    const Tensor targets = testing::random_tokens(B, S, args.vocab_size, 2);
    const double grad_scale =
        1.0;  // the summed loss: gradients of order 1, so tolerances mean something

    Transformer model64(args, DType::F64), model32(args, DType::F32);
    model64.allocate();
    model32.allocate();
    model64.init_weights(7);
    std::vector<Parameter*> params64 = model64.parameters(), params32 = model32.parameters();
    REQUIRE(params64.size() == 2 + 6 * static_cast<size_t>(args.n_layers) + 1);

    auto model_for = [&](DType dtype) -> std::pair<Transformer*, std::vector<Parameter*>*> {
      return dtype == DType::F64 ? std::pair{&model64, &params64} : std::pair{&model32, &params32};
    };
    auto load = [&](const std::vector<Tensor>& values) {
      auto [model, params] = model_for(values[0].dtype());
      for (size_t i = 0; i < params->size(); ++i) (*params)[i]->value.copy_from(values[i]);
      return model;
    };

    testing::GradCase c;
    c.name = "transformer";
    for (Parameter* p : params64) {
      c.inputs.push_back(p->value.clone());
      c.checked.push_back(true);
    }
    c.max_elements = 6;
    c.forward = [&](const std::vector<Tensor>& values) {
      Transformer* model = load(values);
      double loss = model->forward(tokens, targets, grad_scale) * grad_scale;
      model->backward();  // releases the saved activations
      return cast(Tensor::from_vector(std::vector<double>{loss}, {1}), values[0].dtype());
    };
    c.backward = [&](const std::vector<Tensor>& values, const Tensor& dout) {
      Transformer* model = load(values);
      model->zero_grad();
      model->forward(tokens, targets, grad_scale * testing::to_doubles(dout)[0]);
      model->backward();
      std::vector<Tensor> grads;
      for (Parameter* p : *model_for(values[0].dtype()).second) grads.push_back(p->grad.clone());
      return grads;
    };
    for (DType dtype : {DType::F64, DType::F32}) {
      CAPTURE(dtype_name(dtype));
      testing::Tolerance tol =
          dtype == DType::F64 ? testing::Tolerance{1e-9, 1e-5} : testing::Tolerance{1e-6, 1e-3};
      testing::GradCheckResult r = testing::check_gradients(c, dtype, tol);
      MESSAGE("whole model (" << dtype_name(dtype) << "): max abs err " << r.max_abs
                              << ", max rel err " << r.max_rel);
    }
  }

  TEST_CASE("whole model: gradients of two micro-batches accumulate to those of the whole batch") {
    const ModelArgs args = tiny_args();
    Transformer model(args, DType::F64);
    model.allocate();
    model.init_weights(3);
    const Tensor tokens = testing::random_tokens(4, 6, args.vocab_size, 4);
    const Tensor targets = testing::random_tokens(4, 6, args.vocab_size, 5);
    const double scale = 1.0 / 24;

    model.zero_grad();
    double whole = model.forward(tokens, targets, scale);
    model.backward();
    std::vector<Tensor> whole_grads;
    for (Parameter* p : model.parameters()) whole_grads.push_back(p->grad.clone());

    model.zero_grad();
    double halves = 0;
    for (int64_t half = 0; half < 2; ++half) {
      halves += model.forward(tokens.rows(2 * half, 2 * half + 2),
                              targets.rows(2 * half, 2 * half + 2), scale);
      model.backward();
    }
    CHECK(halves == doctest::Approx(whole).epsilon(1e-13));
    std::vector<Parameter*> params = model.parameters();
    for (size_t i = 0; i < params.size(); ++i) {
      CHECK_CLOSE_TENSORS(params[i]->grad, whole_grads[i], (testing::Tolerance{1e-15, 1e-12}),
                          params[i]->name);
    }
  }

}  // TEST_SUITE
