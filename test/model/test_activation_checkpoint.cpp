// Activation checkpointing: every mode gives the gradients of `none` bit for bit, and each mode
// keeps the activation memory it promises. The second test prints the measured peak
// activation memory of each mode on the debug model (B 4, S 256), and checks the replay the
// plan and the trainer's memory check make before training (model/activation_memory.h) against
// it, byte for byte.
#include <doctest/doctest.h>

#include <cstdio>
#include <map>

#include "core/allocator.h"
#include "model/activation_memory.h"
#include "model/transformer.h"
#include "support/small_model.h"
#include "support/tensor_testing.h"

using namespace titan;
using namespace titan::model;

namespace {

const std::vector<std::pair<std::string, ActivationCheckpointPolicy>>& policies() {
  static const std::vector<std::pair<std::string, ActivationCheckpointPolicy>> all = {
      {"none", ActivationCheckpointPolicy::make(ActivationCheckpointMode::None, "2", "option")},
      {"full", ActivationCheckpointPolicy::make(ActivationCheckpointMode::Full, "2", "option")},
      {"selective 2",
       ActivationCheckpointPolicy::make(ActivationCheckpointMode::Selective, "2", "option")},
      {"op", ActivationCheckpointPolicy::make(ActivationCheckpointMode::Op, "2", "option")},
  };
  return all;
}

// What the replay of a model's step says it keeps after forward and holds at its peak, over
// what it held before (the parameters and gradients are the model's own, not replayed).
struct Replayed {
  double kept = 0, peak = 0;
};

Replayed replay(Transformer& model, const ActivationCheckpointPolicy& policy) {
  std::map<std::string, LinearShape> weights;
  for (Linear* linear : model.linears()) {
    weights[linear->fqn()] = {linear->weight().shape[0], linear->weight().shape[1]};
  }
  LocalLinearMemory local;
  HighPrecisionGemmsMemory gemms;
  ParamHooksMemory hooks;
  ActivationShape shape;
  shape.batch = 4;
  shape.seq_len = 256;
  TransformerMemory step(
      model.args(), policy, shape,
      [&](const std::string& fqn) {
        return LinearSeams{&local, &gemms, weights.at(fqn), fqn};
      },
      hooks);
  MemoryTimeline t;
  step.forward(t, {});  // a first step builds the RoPE tables
  step.backward(t);
  const double baseline = t.live().total();
  t.start_peak();
  step.forward(t, {});
  Replayed r;
  r.kept = step.saved_bytes();
  step.backward(t);
  CHECK(t.live().total() == baseline);  // the replay released every activation too
  r.peak = t.peak() - baseline;
  return r;
}

}  // namespace

TEST_SUITE("fast") {
  TEST_CASE("activation checkpointing: every mode gives gradients bit-identical to none") {
    ModelArgs args = testing::small_model_args();
    const Tensor tokens = testing::random_tokens(2, 32, args.vocab_size, 1);
    const Tensor targets = testing::random_tokens(2, 32, args.vocab_size, 2);

    std::vector<Tensor> reference;
    double reference_loss = 0;
    for (const auto& [name, policy] : policies()) {
      CAPTURE(name);
      Transformer model(args, DType::F32);
      model.allocate();
      model.init_weights(11);
      model.set_activation_checkpoint(policy);
      // Two steps of accumulation, so a recompute that leaked state into the next forward shows.
      double loss = 0;
      for (int micro = 0; micro < 2; ++micro) {
        loss += model.forward(tokens, targets, 1.0 / 64);
        model.backward();
      }
      std::vector<Tensor> grads;
      for (Parameter* p : model.parameters()) grads.push_back(p->grad.clone());
      if (reference.empty()) {
        reference = grads;
        reference_loss = loss;
        continue;
      }
      CHECK(loss == reference_loss);
      std::vector<Parameter*> params = model.parameters();
      for (size_t i = 0; i < grads.size(); ++i) {
        CHECK_MESSAGE(testing::bitwise_equal(grads[i], reference[i]),
                      params[i]->name << " differs from mode none");
      }
    }
  }

  TEST_CASE(
      "activation checkpointing: peak activation memory of each mode (debug model B 4 S 256)") {
    const ModelArgs args = model_flavor("debugmodel");
    const Tensor tokens = testing::random_tokens(4, 256, args.vocab_size, 3);
    const Tensor targets = testing::random_tokens(4, 256, args.vocab_size, 4);
    Allocator& memory = allocator_for(Device::cpu());

    std::map<std::string, double> peak_mib, kept_mib;
    std::printf("\nactivation memory, debugmodel, B 4, S 256, f32:\n");
    std::printf("  %-12s %18s %24s\n", "mode", "kept after forward", "peak during fwd+bwd");
    for (const auto& [name, policy] : policies()) {
      Transformer model(args, DType::F32);
      model.allocate();
      model.init_weights(0);
      model.set_activation_checkpoint(policy);
      model.forward(tokens, targets, 1.0 / 1024);  // a first step builds the RoPE tables
      model.backward();
      const int64_t baseline = memory.stats().live_bytes;  // parameters, gradients, tables
      memory.reset_peak();
      model.forward(tokens, targets, 1.0 / 1024);
      kept_mib[name] = static_cast<double>(model.saved_activation_bytes()) / (1 << 20);
      model.backward();
      peak_mib[name] = static_cast<double>(memory.stats().peak_bytes - baseline) / (1 << 20);
      CHECK(memory.stats().live_bytes == baseline);  // backward released every activation
      // The replay of model/activation_memory.h on one rank: the same steps, byte for byte.
      const Replayed replayed = replay(model, policy);
      std::printf("  %-12s %14.1f MiB %20.1f MiB   planned %5.1f and %5.1f MiB\n", name.c_str(),
                  kept_mib[name], peak_mib[name], replayed.kept / (1 << 20),
                  replayed.peak / (1 << 20));
      CHECK(replayed.kept == doctest::Approx(kept_mib[name] * (1 << 20)).epsilon(1e-12));
      CHECK(replayed.peak == doctest::Approx(peak_mib[name] * (1 << 20)).epsilon(1e-12));
    }
    CHECK(kept_mib["full"] < kept_mib["selective 2"]);
    CHECK(kept_mib["selective 2"] < kept_mib["none"]);
    CHECK(kept_mib["full"] < kept_mib["op"]);
    CHECK(kept_mib["op"] < kept_mib["none"]);
    CHECK(peak_mib["full"] < peak_mib["op"]);
    CHECK(peak_mib["op"] < peak_mib["none"]);
    CHECK(peak_mib["selective 2"] < peak_mib["none"]);
  }

}  // TEST_SUITE
