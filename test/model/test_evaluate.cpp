// The forward-only pass (Transformer::evaluate, what validation runs): the loss forward()
// computes, bit for bit, under every activation-checkpoint mode; nothing kept afterwards, no
// gradient touched, less memory at its peak than a training forward; and training after it
// goes on exactly as if it had not run.
#include <doctest/doctest.h>

#include "core/allocator.h"
#include "model/transformer.h"
#include "support/small_model.h"
#include "support/tensor_testing.h"

using namespace titan;
using namespace titan::model;

TEST_SUITE("fast") {
  TEST_CASE("evaluate: the loss of forward — nothing kept — no gradient touched — in every AC mode") {
    const ModelArgs args = testing::small_model_args();
    const Tensor tokens = testing::random_tokens(2, 32, args.vocab_size, 1);
    const Tensor targets = testing::random_tokens(2, 32, args.vocab_size, 2);
    for (const auto& [mode, name] : kActivationCheckpointModes.entries()) {
      CAPTURE(std::string(name));
      Transformer model(args, DType::F32);
      model.allocate();
      model.init_weights(5);
      model.set_activation_checkpoint(ActivationCheckpointPolicy::make(mode, "2", "option"));
      model.zero_grad();

      const double evaluated = model.evaluate(tokens, targets);
      CHECK(model.saved_activation_bytes() == 0);
      CHECK_THROWS_AS(model.backward(), Error);  // nothing to go backward through
      for (Parameter* p : model.parameters()) {
        CHECK_MESSAGE(testing::to_doubles(p->grad) == std::vector<double>(p->grad.numel(), 0.0),
                      p->name << " has a gradient after evaluate");
      }
      // A second evaluation at the same weights gives the same number, and so does forward.
      CHECK(model.evaluate(tokens, targets) == evaluated);
      CHECK(model.forward(tokens, targets, 1.0 / 64) == evaluated);
      model.backward();
    }
  }

  TEST_CASE("evaluate: training around an evaluation goes on bit for bit as without it") {
    const ModelArgs args = testing::small_model_args();
    const Tensor tokens = testing::random_tokens(2, 32, args.vocab_size, 3);
    const Tensor targets = testing::random_tokens(2, 32, args.vocab_size, 4);
    const Tensor held_out = testing::random_tokens(3, 16, args.vocab_size, 5);  // other B and S
    const Tensor held_out_targets = testing::random_tokens(3, 16, args.vocab_size, 6);
    std::vector<std::vector<Tensor>> grads(2);
    double losses[2] = {0, 0};
    for (int with_evaluation = 0; with_evaluation < 2; ++with_evaluation) {
      Transformer model(args, DType::F32);
      model.allocate();
      model.init_weights(9);
      model.zero_grad();
      losses[with_evaluation] += model.forward(tokens, targets, 1.0 / 64);
      model.backward();
      if (with_evaluation) model.evaluate(held_out, held_out_targets);
      losses[with_evaluation] += model.forward(tokens, targets, 1.0 / 64);
      model.backward();
      for (Parameter* p : model.parameters()) grads[with_evaluation].push_back(p->grad.clone());
    }
    CHECK(losses[1] == losses[0]);
    for (size_t i = 0; i < grads[0].size(); ++i) {
      CHECK(testing::bitwise_equal(grads[1][i], grads[0][i]));
    }
  }

  TEST_CASE("evaluate: its peak activation memory is below a training forward's kept activations") {
    const ModelArgs args = model_flavor("debugmodel");
    const Tensor tokens = testing::random_tokens(4, 256, args.vocab_size, 7);
    const Tensor targets = testing::random_tokens(4, 256, args.vocab_size, 8);
    Allocator& memory = allocator_for(Device::cpu());
    Transformer model(args, DType::F32);
    model.allocate();
    model.init_weights(0);
    model.evaluate(tokens, targets);  // builds the RoPE tables
    const int64_t baseline = memory.stats().live_bytes;
    memory.reset_peak();
    model.evaluate(tokens, targets);
    const int64_t evaluate_peak = memory.stats().peak_bytes - baseline;
    CHECK(memory.stats().live_bytes == baseline);  // everything released
    model.forward(tokens, targets, 1.0 / 1024);
    const int64_t kept = model.saved_activation_bytes();
    model.backward();
    MESSAGE("debugmodel B 4 S 256: evaluate peaks at " << evaluate_peak / (1 << 20)
                                                        << " MiB; a training forward keeps "
                                                        << kept / (1 << 20) << " MiB");
    CHECK(evaluate_peak < kept / 2);
  }
}
