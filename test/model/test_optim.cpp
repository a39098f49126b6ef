// AdamW against the update written out in double, the warmup-stable-decay schedule at its
// corners, gradient clipping, and the activation-checkpoint policy's block choice.
#include <doctest/doctest.h>

#include <cmath>
#include <numbers>

#include "core/cast.h"
#include "core/check.h"
#include "model/activation_checkpoint.h"
#include "model/ops/adamw.h"
#include "model/ops/tensor_math.h"
#include "model/optim/adamw_optimizer.h"
#include "model/optim/grad_clip.h"
#include "model/optim/lr_scheduler.h"
#include "model/optim/param_groups.h"
#include "support/tensor_testing.h"

using namespace titan;
using namespace titan::model;

TEST_SUITE("fast") {
  TEST_CASE("adamw_step equals torch.optim.AdamW's update written out in double") {
    const int64_t n = 7;
    Tensor param = testing::random_tensor({n}, DType::F64, 1);
    Tensor m = Tensor::zeros({n}, DType::F64), v = Tensor::zeros({n}, DType::F64);
    std::vector<double> p_ref = testing::to_doubles(param), m_ref(n, 0), v_ref(n, 0);
    const double lr = 1e-2, b1 = 0.9, b2 = 0.95, eps = 1e-8, wd = 0.1;
    for (int64_t step = 1; step <= 3; ++step) {
      Tensor grad = testing::random_tensor({n}, DType::F64, 10 + step);
      adamw_step(param, m, v, grad, AdamWHyper{lr, b1, b2, eps, wd, step});
      std::vector<double> g = testing::to_doubles(grad);
      for (int64_t i = 0; i < n; ++i) {
        p_ref[i] *= 1 - lr * wd;
        m_ref[i] = b1 * m_ref[i] + (1 - b1) * g[i];
        v_ref[i] = b2 * v_ref[i] + (1 - b2) * g[i] * g[i];
        double m_hat = m_ref[i] / (1 - std::pow(b1, step));
        double v_hat = v_ref[i] / (1 - std::pow(b2, step));
        p_ref[i] -= lr * m_hat / (std::sqrt(v_hat) + eps);
      }
    }
    CHECK_CLOSE_TENSORS(param, Tensor::from_vector(p_ref, {n}), (testing::Tolerance{1e-15, 1e-13}),
                        "param");
    CHECK_CLOSE_TENSORS(m, Tensor::from_vector(m_ref, {n}), (testing::Tolerance{1e-15, 1e-13}),
                        "exp_avg");
    CHECK_CLOSE_TENSORS(v, Tensor::from_vector(v_ref, {n}), (testing::Tolerance{1e-15, 1e-13}),
                        "exp_avg_sq");
  }

  TEST_CASE("adamw_step writes the bf16 working copy of the updated fp32 master") {
    const int64_t n = 1000;
    Tensor param = testing::random_tensor({n}, DType::F32, 2);
    Tensor m = Tensor::zeros({n}, DType::F32), v = Tensor::zeros({n}, DType::F32);
    Tensor grad = testing::random_tensor({n}, DType::F32, 3);
    Tensor working = Tensor::zeros({n}, DType::BF16);
    adamw_step(param, m, v, grad, AdamWHyper{1e-2}, working);
    // The copy is the master rounded to nearest even: exactly cast()'s rounding.
    CHECK(testing::bitwise_equal(working, cast(param, DType::BF16)));
  }

  TEST_CASE("adamw_step with bf16 moments: the f32 update and the moments rounded to nearest") {
    const int64_t n = 1000;
    Tensor param = testing::random_tensor({n}, DType::F32, 4);
    Tensor param_ref = cast(param, DType::F32);
    Tensor m = Tensor::zeros({n}, DType::BF16), v = Tensor::zeros({n}, DType::BF16);
    Tensor m_ref = Tensor::zeros({n}, DType::F32), v_ref = Tensor::zeros({n}, DType::F32);
    // Step 1 from zero moments: the step reads the unrounded f32 moments, so the param is the
    // f32 state's bit for bit, and the stored moments are the f32 ones rounded.
    Tensor grad = testing::random_tensor({n}, DType::F32, 5);
    adamw_step(param, m, v, grad, AdamWHyper{1e-2, 0.9, 0.95, 1e-8, 0.1, 1});
    adamw_step(param_ref, m_ref, v_ref, grad, AdamWHyper{1e-2, 0.9, 0.95, 1e-8, 0.1, 1});
    CHECK(testing::bitwise_equal(param, param_ref));
    CHECK(testing::bitwise_equal(m, cast(m_ref, DType::BF16)));
    CHECK(testing::bitwise_equal(v, cast(v_ref, DType::BF16)));
    // Step 2 starts from the rounded moments: the f32 state's update from those same bf16 values
    // widened, element by element.
    Tensor m_wide = cast(m, DType::F32), v_wide = cast(v, DType::F32);
    Tensor param_wide = cast(param, DType::F32);
    Tensor grad2 = testing::random_tensor({n}, DType::F32, 6);
    adamw_step(param, m, v, grad2, AdamWHyper{1e-2, 0.9, 0.95, 1e-8, 0.1, 2});
    adamw_step(param_wide, m_wide, v_wide, grad2, AdamWHyper{1e-2, 0.9, 0.95, 1e-8, 0.1, 2});
    CHECK(testing::bitwise_equal(param, param_wide));
    CHECK(testing::bitwise_equal(m, cast(m_wide, DType::BF16)));
    CHECK(testing::bitwise_equal(v, cast(v_wide, DType::BF16)));
    // And it did differ from the f32 state's second step, which kept the unrounded moments.
    adamw_step(param_ref, m_ref, v_ref, grad2, AdamWHyper{1e-2, 0.9, 0.95, 1e-8, 0.1, 2});
    CHECK_FALSE(testing::bitwise_equal(m_wide, m_ref));
  }

  TEST_CASE("AdamW with bf16 state holds half the bytes and refuses f64 master weights") {
    Parameter p = declare_parameter("w", {3, 2}, InitSpec::ones(), DType::F32);
    allocate_parameter(p);
    AdamW f32({&p}, AdamWConfig{});
    AdamW bf16({&p}, AdamWConfig{0.9, 0.95, 1e-8, 0.1, OptimizerStateDtype::BFloat16});
    CHECK(bf16.state()[0].exp_avg.dtype() == DType::BF16);
    CHECK(bf16.state()[0].exp_avg_sq.dtype() == DType::BF16);
    CHECK(bf16.state_bytes() * 2 == f32.state_bytes());
    Parameter q = declare_parameter("q", {4}, InitSpec::ones(), DType::F64);
    allocate_parameter(q);
    CHECK_THROWS_WITH_AS(
        AdamW({&q}, AdamWConfig{0.9, 0.95, 1e-8, 0.1, OptimizerStateDtype::BFloat16}),
        doctest::Contains("bf16 moments are kept beside f32 master weights"), Error);
  }

  TEST_CASE("parameter groups: the first matching rule wins and the rest take the defaults") {
    const std::vector<std::string> names = {"tok_embeddings.weight",
                                            "layers.0.attention_norm.weight",
                                            "layers.0.attention.wqkv.weight", "norm.weight",
                                            "output.weight"};
    const std::vector<ParamGroupRule> rules = {{"norm", 1.0, 0.0},
                                               {"^tok_embeddings", 0.5, 0.0},
                                               {"weight$", 2.0, std::nullopt}};
    const std::vector<ParamHyper> h = assign_param_groups(rules, names, 0.1, "optimizer.groups");
    REQUIRE(h.size() == names.size());
    CHECK(h[0].group == 1);
    CHECK(h[0].lr_scale == 0.5);
    CHECK(h[0].weight_decay == 0.0);
    CHECK(h[1].group == 0);  // "norm" comes before "weight$"
    CHECK(h[1].weight_decay == 0.0);
    CHECK(h[2].group == 2);
    CHECK(h[2].lr_scale == 2.0);
    CHECK(h[2].weight_decay == 0.1);  // unset: the optimizer's
    CHECK(h[3].group == 0);
    CHECK(h[4].group == 2);
    const std::vector<std::string> lines =
        describe_param_groups(rules, h, {10, 2, 6, 2, 10}, 0.1, "optimizer.groups");
    REQUIRE(lines.size() == 4);
    CHECK(lines[0] == "optimizer.groups[0] 'norm': 2 parameters (4 values), lr × 1, weight_decay 0");
    CHECK(lines[3] == "the other parameters: 0 parameters (0 values), lr × 1, weight_decay 0.1");
  }

  TEST_CASE("parameter groups: a rule that matches nothing or is not a regex is refused") {
    const std::vector<std::string> names = {"norm.weight", "output.weight"};
    CHECK_THROWS_WITH_AS(
        assign_param_groups({{"^layers", 1.0, 0.0}}, names, 0.1, "optimizer.groups"),
        doctest::Contains("optimizer.groups[0].match: '^layers' matches no parameter"),
        InputError);
    // Taken first by an earlier rule counts as matching nothing: the rule has no effect.
    CHECK_THROWS_WITH_AS(
        assign_param_groups({{"weight", 1.0, 0.0}, {"norm", 1.0, 0.0}}, names, 0.1, "g"),
        doctest::Contains("g[1].match: 'norm' matches no parameter that an earlier group"),
        InputError);
    CHECK_THROWS_WITH_AS(assign_param_groups({{"(", 1.0, 0.0}}, names, 0.1, "g"),
                         doctest::Contains("g[0].match: '(' is not a regex"), InputError);
  }

  TEST_CASE("AdamW with groups: a parameter without decay moves by the gradient step alone") {
    // Two copies of one parameter; the first group exempts "a" from decay and halves its lr.
    auto make = [](const char* name) {
      Parameter p = declare_parameter(name, {4, 3}, InitSpec::ones(), DType::F32);
      allocate_parameter(p);
      p.value.copy_from(testing::random_tensor({4, 3}, DType::F32, 7));
      p.grad.copy_from(testing::random_tensor({4, 3}, DType::F32, 8));
      return p;
    };
    Parameter a = make("a"), b = make("b");
    const std::vector<ParamHyper> hypers =
        assign_param_groups({{"^a$", 0.5, 0.0}}, {"a", "b"}, 0.1, "optimizer.groups");
    AdamW grouped({&a, &b}, AdamWConfig{0.9, 0.95, 1e-8, 0.1}, hypers);
    grouped.step(1e-2);
    // The references: the same step with decay 0 at lr/2, and with the top-level values.
    Parameter a_ref = make("a"), b_ref = make("b");
    AdamW no_decay({&a_ref}, AdamWConfig{0.9, 0.95, 1e-8, 0.0});
    no_decay.step(0.5e-2);
    AdamW plain({&b_ref}, AdamWConfig{0.9, 0.95, 1e-8, 0.1});
    plain.step(1e-2);
    CHECK(testing::bitwise_equal(a.value, a_ref.value));
    CHECK(testing::bitwise_equal(b.value, b_ref.value));
    CHECK_FALSE(testing::bitwise_equal(a.value, b.value));
  }

  TEST_CASE("AdamW optimizer keeps one state per parameter and counts steps from 1") {
    Parameter p = declare_parameter("w", {3, 2}, InitSpec::ones(), DType::F32);
    allocate_parameter(p);
    p.value.fill_(1.0);
    p.grad.fill_(0.5);
    AdamW opt({&p}, AdamWConfig{0.9, 0.95, 1e-8, 0.0});
    opt.step(0.1);
    // First step: m̂ = g, v̂ = g², so every weight moves by lr·g/|g| = 0.1.
    for (int64_t i = 0; i < 6; ++i) CHECK(p.value.data<float>()[i] == doctest::Approx(0.9f));
    CHECK(opt.steps_taken() == 1);
    CHECK(opt.state_bytes() == 2 * 6 * 4);
  }

  TEST_CASE("lr schedule: linear warmup then stable then decay to the floor") {
    LrScheduler wsd(1.0, 100, 10, 0.5, DecayType::Linear, 0.1);
    CHECK(wsd.warmup_steps() == 10);
    CHECK(wsd.decay_steps() == 50);
    CHECK(wsd.stable_steps() == 40);
    CHECK(wsd.lr(0) == doctest::Approx(1.0 / 11));
    CHECK(wsd.lr(9) == doctest::Approx(10.0 / 11));
    CHECK(wsd.lr(10) == 1.0);
    CHECK(wsd.lr(49) == 1.0);
    CHECK(wsd.lr(50) == doctest::Approx(0.1 + 0.9 * (1 - 1.0 / 50)));
    CHECK(wsd.lr(99) == doctest::Approx(0.1));

    LrScheduler cosine(2.0, 20, 0, std::nullopt, DecayType::Cosine, 0.0);
    CHECK(cosine.stable_steps() == 0);
    CHECK(cosine.lr(9) == doctest::Approx(2.0 * 0.5 * (1 + std::cos(std::numbers::pi * 10 / 20))));
    CHECK(cosine.lr(19) == doctest::Approx(0.0));

    LrScheduler sqrt_decay(1.0, 10, 2, std::nullopt, DecayType::Sqrt, 0.0);
    CHECK(sqrt_decay.lr(5) == doctest::Approx(1 - std::sqrt(4.0 / 8)));
    CHECK_THROWS_AS(kDecayTypes.parse("exponential", "lr_scheduler.decay_type"), InputError);
  }

  // The gradient norm's batch: what sum_of_squares gives tensor by tensor, in order.
  TEST_CASE("sums_of_squares gives each tensor's sum of squares in order and 0 for an empty one") {
    const Tensor a = Tensor::from_vector<float>({3, 4}, {2});
    const Tensor b = Tensor::from_vector<double>({1, -2, 2}, {3});
    const Tensor none = Tensor::empty({0}, DType::F32, Device::cpu());
    const std::vector<double> sums = sums_of_squares({a, none, b});
    REQUIRE(sums.size() == 3);
    CHECK(sums[0] == 25.0);
    CHECK(sums[1] == 0.0);
    CHECK(sums[2] == 9.0);
    CHECK(sums[0] == sum_of_squares(a));
    CHECK(sums_of_squares({}).empty());
  }

  TEST_CASE("gradient clipping scales to max_norm only when the norm exceeds it") {
    Parameter a = declare_parameter("a", {2}, InitSpec::ones(), DType::F64);
    allocate_parameter(a);
    Parameter b = declare_parameter("b", {1}, InitSpec::ones(), DType::F64);
    allocate_parameter(b);
    a.grad.data<double>()[0] = 3;
    a.grad.data<double>()[1] = 0;
    b.grad.data<double>()[0] = 4;
    std::vector<Parameter*> params = {&a, &b};
    double norm = std::sqrt(local_grad_sum_of_squares(params));
    CHECK(norm == 5.0);
    clip_grads_to_norm(params, norm, 10.0);
    CHECK(b.grad.data<double>()[0] == 4.0);
    clip_grads_to_norm(params, norm, 1.0);
    CHECK(std::sqrt(local_grad_sum_of_squares(params)) == doctest::Approx(1.0).epsilon(1e-6));
    clip_grads_to_norm(params, 1.0, 0.0);  // 0 disables clipping
    CHECK(std::sqrt(local_grad_sum_of_squares(params)) == doctest::Approx(1.0).epsilon(1e-6));
  }

  TEST_CASE("activation checkpoint policy: which blocks recompute") {
    // As titan_train reads activation_checkpoint.mode and selective_ac_option.
    auto parse = [](std::string_view mode, std::string_view option) {
      return ActivationCheckpointPolicy::make(
          kActivationCheckpointModes.parse(mode, "activation_checkpoint.mode"), option,
          "activation_checkpoint.selective_ac_option");
    };
    auto selective = parse("selective", "2");
    CHECK(selective.for_block(0) == BlockRecompute::None);
    CHECK(selective.for_block(1) == BlockRecompute::Full);
    CHECK(selective.for_block(3) == BlockRecompute::Full);
    CHECK(parse("selective", "op").for_block(0) == BlockRecompute::Op);
    CHECK(parse("full", "2").for_block(4) == BlockRecompute::Full);
    CHECK_THROWS_WITH_AS(parse("some", "2"), doctest::Contains("activation_checkpoint.mode"),
                         InputError);
    CHECK_THROWS_WITH_AS(parse("selective", "0"), doctest::Contains("selective_ac_option"),
                         InputError);
  }

}  // TEST_SUITE
