// The loss mask of fine-tuning on conversations (model/ops/cross_entropy.h: a negative target):
// in f64, a window's loss is its trained tokens' losses summed over the trained-token count,
// and its gradient, against finite differences of that loss, is theirs alone — the untrained
// targets add nothing.
#include <doctest/doctest.h>

#include <cmath>

#include "core/cast.h"
#include "model/ops/cross_entropy.h"
#include "model/transformer.h"
#include "support/gradcheck.h"
#include "support/small_model.h"
#include "support/tensor_testing.h"

using namespace titan;
using namespace titan::model;

namespace loss_mask_test {

ModelArgs tiny_args() {
  return testing::small_model_args(
      {.dim = 16, .n_layers = 2, .n_heads = 4, .n_kv_heads = 2, .ffn_dim = 24, .vocab_size = 32});
}

TEST_SUITE("fast") {
  TEST_CASE("loss mask: the loss and gradients in f64 are the trained tokens' alone") {
    const int64_t B = 2, S = 6;
    const ModelArgs args = tiny_args();
    const Tensor tokens = testing::random_tokens(B, S, args.vocab_size, 1);
    const Tensor targets = testing::random_tokens(B, S, args.vocab_size, 2);
    // A prompt and an answer in each row: the first half untrained.
    Tensor masked = targets.clone();
    int64_t trained = 0;
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t s = 0; s < S; ++s) {
        if (s < S / 2 + b) {
          masked.data<int32_t>()[b * S + s] = -1;
        } else {
          ++trained;
        }
      }
    }
    Transformer model(args, DType::F64);
    model.allocate();
    model.init_weights(7);
    std::vector<Parameter*> params = model.parameters();

    // The loss: each trained token's own loss from the unmasked forward, summed, over the count.
    const Tensor per_token = model.evaluate_tokens(tokens, targets);
    double expected = 0;
    for (int64_t i = 0; i < B * S; ++i) {
      if (masked.data<int32_t>()[i] >= 0) expected += per_token.data<double>()[i];
    }
    expected /= static_cast<double>(trained);
    const double scale = 1.0 / static_cast<double>(trained);
    const double got = model.forward(tokens, masked, scale) * scale;
    model.backward();
    CHECK(got == doctest::Approx(expected).epsilon(1e-14));
    const Tensor masked_losses = model.evaluate_tokens(tokens, masked);
    for (int64_t i = 0; i < B * S; ++i) {
      if (masked.data<int32_t>()[i] < 0) CHECK(masked_losses.data<double>()[i] == 0.0);
    }

    // The gradient against finite differences of the masked loss.
    auto load = [&](const std::vector<Tensor>& values) {
      for (size_t i = 0; i < params.size(); ++i) params[i]->value.copy_from(values[i]);
    };
    testing::GradCase c;
    c.name = "masked loss";
    for (Parameter* p : params) {
      c.inputs.push_back(p->value.clone());
      c.checked.push_back(true);
    }
    c.max_elements = 6;
    c.forward = [&](const std::vector<Tensor>& values) {
      load(values);
      const double loss = model.forward(tokens, masked, scale) * scale;
      model.backward();
      return Tensor::from_vector(std::vector<double>{loss}, {1});
    };
    c.backward = [&](const std::vector<Tensor>& values, const Tensor& dout) {
      load(values);
      model.zero_grad();
      model.forward(tokens, masked, scale * testing::to_doubles(dout)[0]);
      model.backward();
      std::vector<Tensor> grads;
      for (Parameter* p : params) grads.push_back(p->grad.clone());
      return grads;
    };
    const testing::GradCheckResult r =
        testing::check_gradients(c, DType::F64, testing::Tolerance{1e-9, 1e-5});
    MESSAGE("masked loss (f64): max abs err " << r.max_abs << ", max rel err " << r.max_rel);

    // And the mask matters: the unmasked gradient differs.
    model.zero_grad();
    model.forward(tokens, masked, scale);
    model.backward();
    const Tensor masked_grad = params.back()->grad.clone();
    model.zero_grad();
    model.forward(tokens, targets, scale);
    model.backward();
    CHECK_FALSE(testing::bitwise_equal(masked_grad, params.back()->grad));
  }
}

}  // namespace loss_mask_test
