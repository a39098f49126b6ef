// Every op's backward against finite differences of its forward, in f64 and in f32 (the f32
// gradients held to the f64 finite differences), plus the f32 forward against the f64 one.
#include <doctest/doctest.h>

#include <cmath>

#include "core/cast.h"
#include "core/check.h"
#include "core/gemm.h"
#include "model/config.h"
#include "model/linear.h"
#include "model/ops/attention/attention.h"
#include "model/ops/cross_entropy.h"
#include "model/ops/embedding.h"
#include "model/ops/rmsnorm.h"
#include "model/ops/rope.h"
#include "model/ops/swiglu.h"
#include "model/ops/tensor_math.h"
#include "support/gradcheck.h"
#include "support/tensor_testing.h"

using namespace titan;
using namespace titan::model;
using titan::testing::GradCase;
using titan::testing::Tolerance;

namespace {

void check_both_precisions(const GradCase& c) {
  for (DType dtype : {DType::F64, DType::F32}) {
    CAPTURE(dtype_name(dtype));
    testing::GradCheckResult r =
        testing::check_gradients(c, dtype, testing::gradient_tolerance(dtype));
    MESSAGE(c.name << " (" << dtype_name(dtype) << "): max abs err " << r.max_abs
                   << ", max rel err " << r.max_rel);
  }
}

// The f32 forward against the f64 forward on the same inputs.
void check_forward_precision(const GradCase& c) {
  std::vector<Tensor> f64 = c.inputs, f32;
  for (const Tensor& t : c.inputs) f32.push_back(is_floating(t.dtype()) ? cast(t, DType::F32) : t);
  CHECK_CLOSE_TENSORS(c.forward(f32), c.forward(f64), (Tolerance{1e-5, 1e-4}),
                      c.name + " forward f32 vs f64");
}

Tensor tokens_tensor(std::vector<int32_t> ids) {
  return Tensor::from_vector(ids, {static_cast<int64_t>(ids.size())});
}

Tensor like(const Tensor& t) { return Tensor::empty(t.shape(), t.dtype()); }

}  // namespace

TEST_SUITE("fast") {
  TEST_CASE("embedding: backward matches finite differences and out-of-shard tokens give zeros") {
    const int64_t V = 7, D = 5;
    Tensor tokens = tokens_tensor({3, 0, 6, 3, 2, 9});  // 9 is outside this shard of 7 rows
    GradCase c;
    c.name = "embedding";
    c.inputs = {testing::random_tensor({V, D}, DType::F64, 1), tokens};
    c.checked = {true, false};
    c.forward = [&](const std::vector<Tensor>& in) {
      Tensor out = Tensor::empty({tokens.numel(), D}, in[0].dtype());
      embedding_forward(out, in[0], in[1]);
      return out;
    };
    c.backward = [&](const std::vector<Tensor>& in, const Tensor& dout) {
      Tensor dw = Tensor::zeros(in[0].shape(), in[0].dtype());
      embedding_backward(dw, dout, in[1]);
      return std::vector<Tensor>{dw, {}};
    };
    check_both_precisions(c);
    Tensor out = c.forward(c.inputs);
    for (int64_t d = 0; d < D; ++d) CHECK(out.data<double>()[5 * D + d] == 0.0);

    // A vocab shard starting at row 4 sees tokens 6 (its row 2) and nothing else of these.
    Tensor shard = c.inputs[0].rows(4, 7).contiguous();
    Tensor sharded_out = Tensor::empty({tokens.numel(), D}, DType::F64);
    embedding_forward(sharded_out, shard, tokens, /*vocab_start=*/4);
    for (int64_t d = 0; d < D; ++d) {
      CHECK(sharded_out.data<double>()[2 * D + d] == c.inputs[0].data<double>()[6 * D + d]);
      CHECK(sharded_out.data<double>()[0 * D + d] == 0.0);
    }
  }

  TEST_CASE("rmsnorm: backward matches finite differences") {
    const int64_t T = 4, D = 6;
    GradCase c;
    c.name = "rmsnorm";
    c.inputs = {testing::random_tensor({T, D}, DType::F64, 2),
                testing::random_tensor({D}, DType::F64, 3)};
    c.checked = {true, true};
    c.forward = [&](const std::vector<Tensor>& in) {
      Tensor y = like(in[0]), rstd = Tensor::empty({T}, in[0].dtype());
      rmsnorm_forward(y, rstd, in[0], in[1], 1e-5);
      return y;
    };
    c.backward = [&](const std::vector<Tensor>& in, const Tensor& dy) {
      Tensor y = like(in[0]), rstd = Tensor::empty({T}, in[0].dtype());
      rmsnorm_forward(y, rstd, in[0], in[1], 1e-5);
      Tensor dx = like(in[0]), dw = Tensor::zeros({D}, in[0].dtype());
      rmsnorm_backward(dx, dw, dy, in[0], in[1], rstd);
      return std::vector<Tensor>{dx, dw};
    };
    check_both_precisions(c);
    check_forward_precision(c);
  }

  TEST_CASE("rmsnorm: the fused residual adds give the bits of accumulate and the plain norm") {
    const int64_t T = 5, D = 12;
    Tensor h = testing::random_tensor({T, D}, DType::F32, 21, 2.0);
    Tensor residual = testing::random_tensor({T, D}, DType::F32, 22, 2.0);
    Tensor weight = testing::random_tensor({D}, DType::F32, 23);
    Tensor dy = testing::random_tensor({T, D}, DType::F32, 24);
    Tensor dresidual = testing::random_tensor({T, D}, DType::F32, 25);
    Tensor dweight_start = testing::random_tensor({D}, DType::F32, 26);

    // Forward: h += residual, then the norm of h.
    Tensor h_plain = h.clone(), y_plain = like(h), rstd_plain = Tensor::empty({T}, DType::F32);
    accumulate(h_plain, residual);
    rmsnorm_forward(y_plain, rstd_plain, h_plain, weight, 1e-5);
    Tensor h_fused = h.clone(), y_fused = like(h), rstd_fused = Tensor::empty({T}, DType::F32);
    add_rmsnorm_forward(y_fused, rstd_fused, h_fused, residual, weight, 1e-5);
    CHECK(testing::bitwise_equal(h_fused, h_plain));
    CHECK(testing::bitwise_equal(y_fused, y_plain));
    CHECK(testing::bitwise_equal(rstd_fused, rstd_plain));

    // Backward: the norm's dx, plus the residual path's gradient.
    Tensor dx_plain = like(h), dw_plain = dweight_start.clone();
    rmsnorm_backward(dx_plain, dw_plain, dy, h_plain, weight, rstd_plain);
    accumulate(dx_plain, dresidual);
    Tensor dx_fused = like(h), dw_fused = dweight_start.clone();
    rmsnorm_backward_add(dx_fused, dw_fused, dy, h_plain, weight, rstd_plain, dresidual);
    CHECK(testing::bitwise_equal(dx_fused, dx_plain));
    CHECK(testing::bitwise_equal(dw_fused, dw_plain));

    // A wrong shape is refused before h is touched.
    Tensor untouched = h.clone();
    CHECK_THROWS_AS(add_rmsnorm_forward(Tensor::empty({T, D + 1}, DType::F32), rstd_fused,
                                        untouched, residual, weight, 1e-5),
                    Error);
    CHECK(testing::bitwise_equal(untouched, h));
    CHECK_THROWS_AS(add_rmsnorm_forward(y_fused, rstd_fused, untouched,
                                        Tensor::empty({T, D - 1}, DType::F32), weight, 1e-5),
                    Error);
  }

  TEST_CASE("rope: backward matches finite differences and only q/k heads rotate") {
    const int64_t B = 2, S = 5, heads = 3, Dh = 4, W = (heads + 1) * Dh;  // 3 rotated heads + v
    RopeScaling scaling;  // Llama 3.1 scaling on, as in training
    auto tables = [&](DType dtype) {
      Tensor cos = Tensor::empty({S, Dh / 2}, dtype), sin = Tensor::empty({S, Dh / 2}, dtype);
      rope_tables(cos, sin, Dh, 500000.0, scaling);
      return std::pair{cos, sin};
    };
    GradCase c;
    c.name = "rope";
    c.inputs = {testing::random_tensor({B * S, W}, DType::F64, 4)};
    c.checked = {true};
    c.forward = [&](const std::vector<Tensor>& in) {
      auto [cos, sin] = tables(in[0].dtype());
      Tensor x = in[0].clone();
      rope_forward(x, cos, sin, S, heads, Dh);
      return x;
    };
    c.backward = [&](const std::vector<Tensor>& in, const Tensor& dy) {
      auto [cos, sin] = tables(in[0].dtype());
      Tensor dx = dy.clone();
      rope_backward(dx, cos, sin, S, heads, Dh);
      return std::vector<Tensor>{dx};
    };
    check_both_precisions(c);
    check_forward_precision(c);

    Tensor y = c.forward(c.inputs);
    for (int64_t t = 0; t < B * S; ++t) {
      for (int64_t e = heads * Dh; e < W; ++e)
        CHECK(y.data<double>()[t * W + e] == c.inputs[0].data<double>()[t * W + e]);
    }
    // Position 0 is not rotated; position 1 is.
    CHECK(y.data<double>()[0] == c.inputs[0].data<double>()[0]);
    CHECK(y.data<double>()[W] != c.inputs[0].data<double>()[W]);
  }

  TEST_CASE("rope tables: Llama 3.1 scaling keeps high frequencies and divides low ones by 8") {
    const int64_t Dh = 128, S = 2;
    Tensor cos = Tensor::empty({S, Dh / 2}, DType::F64),
           sin = Tensor::empty({S, Dh / 2}, DType::F64);
    rope_tables(cos, sin, Dh, 500000.0, RopeScaling{});
    // At position 1 the angle is the frequency itself.
    auto freq = [&](int64_t i) {
      return std::atan2(sin.data<double>()[Dh / 2 + i], cos.data<double>()[Dh / 2 + i]);
    };
    CHECK(freq(0) == doctest::Approx(1.0));                          // wavelength 2π < 2048: kept
    double unscaled_last = 1.0 / std::pow(500000.0, 126.0 / 128.0);  // wavelength > 8192
    CHECK(freq(63) == doctest::Approx(unscaled_last / 8.0).epsilon(1e-9));
  }

  TEST_CASE("attention: backward matches finite differences with grouped-query heads") {
    for (auto [heads, kv_heads] : {std::pair<int64_t, int64_t>{2, 2}, {4, 2}, {4, 1}}) {
      const int64_t B = 2, S = 5, Dh = 4;
      const AttentionShape shape{B, S, heads, kv_heads, Dh};
      const int64_t W = (heads + 2 * kv_heads) * Dh;
      GradCase c;
      c.name = "attention H" + std::to_string(heads) + " Hkv" + std::to_string(kv_heads);
      c.inputs = {testing::random_tensor({B * S, W}, DType::F64, 5)};
      c.checked = {true};
      c.forward = [&](const std::vector<Tensor>& in) {
        Tensor out = Tensor::empty({B * S, heads * Dh}, in[0].dtype());
        Tensor lse = Tensor::empty({B, heads, S}, in[0].dtype());
        attention_forward(out, lse, in[0], shape);
        return out;
      };
      c.backward = [&](const std::vector<Tensor>& in, const Tensor& dout) {
        Tensor out = Tensor::empty({B * S, heads * Dh}, in[0].dtype());
        Tensor lse = Tensor::empty({B, heads, S}, in[0].dtype());
        attention_forward(out, lse, in[0], shape);
        Tensor dqkv = like(in[0]);
        attention_backward(dqkv, dout, in[0], out, lse, shape);
        return std::vector<Tensor>{dqkv};
      };
      check_both_precisions(c);
      check_forward_precision(c);
    }
  }

  TEST_CASE("attention: causal so a token's output ignores every later token") {
    const int64_t B = 1, S = 6, H = 2, Hkv = 1, Dh = 4, W = (H + 2 * Hkv) * Dh;
    const AttentionShape shape{B, S, H, Hkv, Dh};
    Tensor qkv = testing::random_tensor({S, W}, DType::F64, 6);
    Tensor out1 = Tensor::empty({S, H * Dh}, DType::F64),
           lse = Tensor::empty({B, H, S}, DType::F64);
    attention_forward(out1, lse, qkv, shape);
    Tensor changed = qkv.clone();
    for (int64_t e = 0; e < W; ++e) changed.data<double>()[(S - 1) * W + e] += 1.0;  // last token
    Tensor out2 = Tensor::empty({S, H * Dh}, DType::F64);
    attention_forward(out2, lse, changed, shape);
    CHECK(
        testing::bitwise_equal(out1.rows(0, S - 1).contiguous(), out2.rows(0, S - 1).contiguous()));
    CHECK_FALSE(
        testing::bitwise_equal(out1.rows(S - 1, S).contiguous(), out2.rows(S - 1, S).contiguous()));
    // The first token attends only to itself: its output is its own v head.
    for (int64_t h = 0; h < H; ++h) {
      for (int64_t e = 0; e < Dh; ++e) {
        CHECK(out1.data<double>()[h * Dh + e] ==
              doctest::Approx(qkv.data<double>()[(H + Hkv) * Dh + e]));
      }
    }
  }

  TEST_CASE("swiglu: backward matches finite differences") {
    const int64_t T = 3, F = 5;
    GradCase c;
    c.name = "swiglu";
    c.inputs = {testing::random_tensor({T, 2 * F}, DType::F64, 7, 3.0)};
    c.checked = {true};
    c.forward = [&](const std::vector<Tensor>& in) {
      Tensor out = Tensor::empty({T, F}, in[0].dtype());
      swiglu_forward(out, in[0]);
      return out;
    };
    c.backward = [&](const std::vector<Tensor>& in, const Tensor& dout) {
      Tensor dh13 = like(in[0]);
      swiglu_backward(dh13, dout, in[0]);
      return std::vector<Tensor>{dh13};
    };
    check_both_precisions(c);
    check_forward_precision(c);
  }

  TEST_CASE("linear: the three GEMMs match finite differences") {
    const int64_t T = 4, in_features = 6, out_features = 3;
    GradCase c;
    c.name = "linear";
    c.inputs = {testing::random_tensor({T, in_features}, DType::F64, 8),
                testing::random_tensor({out_features, in_features}, DType::F64, 9)};
    c.checked = {true, true};
    auto make_linear = [&](const Tensor& w, Parameter& p) {
      p = declare_parameter("w", w.shape(), InitSpec::ones(), w.dtype());
      allocate_parameter(p);
      p.value.copy_from(w);
      return Linear("test.linear", &p);
    };
    c.forward = [&](const std::vector<Tensor>& in) {
      Parameter p;
      return make_linear(in[1], p).forward(in[0]);
    };
    c.backward = [&](const std::vector<Tensor>& in, const Tensor& dy) {
      Parameter p;
      Tensor dx = make_linear(in[1], p).backward(dy, in[0]);
      return std::vector<Tensor>{dx, p.grad};
    };
    check_both_precisions(c);
    check_forward_precision(c);
  }

  TEST_CASE("cross-entropy: loss and fused gradient match finite differences") {
    const int64_t T = 5, V = 7;
    const double grad_scale = 1.0 / T;
    Tensor targets = Tensor::from_vector(std::vector<int32_t>{0, 6, 3, 3, 1}, {T});
    // forward: [1] = grad_scale · Σ losses, so the gradient of Σ out ⊙ dout is
    // dout[0]·grad_scale·dΣloss.
    auto loss_and_grad = [&](const Tensor& logits, double scale) {
      DType dt = logits.dtype();
      Tensor row_max = Tensor::empty({T}, dt), sum_exp = Tensor::empty({T}, dt);
      Tensor target_logit = Tensor::empty({T}, dt), losses = Tensor::empty({T}, dt);
      Tensor dlogits = logits.clone();
      cross_entropy_row_max(row_max, logits);
      cross_entropy_row_sums(sum_exp, target_logit, logits, targets, row_max, 0);
      cross_entropy_loss_and_grad(losses, dlogits, dlogits, targets, row_max, sum_exp, target_logit,
                                  0, scale);
      return std::pair{losses, dlogits};
    };
    GradCase c;
    c.name = "cross_entropy";
    c.inputs = {testing::random_tensor({T, V}, DType::F64, 10, 4.0)};
    c.checked = {true};
    c.forward = [&](const std::vector<Tensor>& in) {
      std::vector<double> losses = testing::to_doubles(loss_and_grad(in[0], grad_scale).first);
      double sum = 0;
      for (double l : losses) sum += l;
      return cast(Tensor::from_vector(std::vector<double>{sum * grad_scale}, {1}), in[0].dtype());
    };
    c.backward = [&](const std::vector<Tensor>& in, const Tensor& dout) {
      double w = testing::to_doubles(dout)[0];
      return std::vector<Tensor>{loss_and_grad(in[0], grad_scale * w).second};
    };
    check_both_precisions(c);

    // The loss itself against log-softmax in double.
    Tensor losses = loss_and_grad(c.inputs[0], grad_scale).first;
    for (int64_t t = 0; t < T; ++t) {
      double max = -1e300, sum = 0;
      for (int64_t v = 0; v < V; ++v) max = std::max(max, c.inputs[0].data<double>()[t * V + v]);
      for (int64_t v = 0; v < V; ++v) sum += std::exp(c.inputs[0].data<double>()[t * V + v] - max);
      double expected =
          std::log(sum) + max - c.inputs[0].data<double>()[t * V + targets.data<int32_t>()[t]];
      CHECK(losses.data<double>()[t] == doctest::Approx(expected).epsilon(1e-12));
    }
  }

  TEST_CASE(
      "cross-entropy: a vocab split over shards with all-reduces between phases equals the whole") {
    const int64_t T = 6, V = 10, split = 4;  // shard 0 holds ids [0, 4), shard 1 ids [4, 10)
    Tensor logits = testing::random_tensor({T, V}, DType::F64, 11, 3.0);
    Tensor targets = Tensor::from_vector(std::vector<int32_t>{0, 9, 3, 4, 7, 2}, {T});
    auto run = [&](std::vector<Tensor> shards, std::vector<int64_t> starts) {
      size_t n = shards.size();
      std::vector<Tensor> row_max(n), sum_exp(n), target_logit(n), losses(n);
      for (size_t s = 0; s < n; ++s) {
        row_max[s] = Tensor::empty({T}, DType::F64);
        sum_exp[s] = Tensor::empty({T}, DType::F64);
        target_logit[s] = Tensor::empty({T}, DType::F64);
        losses[s] = Tensor::empty({T}, DType::F64);
        cross_entropy_row_max(row_max[s], shards[s]);
      }
      for (int64_t t = 0; t < T; ++t) {  // all-reduce max
        double m = -1e300;
        for (size_t s = 0; s < n; ++s) m = std::max(m, row_max[s].data<double>()[t]);
        for (size_t s = 0; s < n; ++s) row_max[s].data<double>()[t] = m;
      }
      for (size_t s = 0; s < n; ++s) {
        cross_entropy_row_sums(sum_exp[s], target_logit[s], shards[s], targets, row_max[s],
                               starts[s]);
      }
      for (int64_t t = 0; t < T; ++t) {  // all-reduce sum of both statistics
        double se = 0, tl = 0;
        for (size_t s = 0; s < n; ++s) {
          se += sum_exp[s].data<double>()[t];
          tl += target_logit[s].data<double>()[t];
        }
        for (size_t s = 0; s < n; ++s) {
          sum_exp[s].data<double>()[t] = se;
          target_logit[s].data<double>()[t] = tl;
        }
      }
      for (size_t s = 0; s < n; ++s) {
        cross_entropy_loss_and_grad(losses[s], shards[s], shards[s], targets, row_max[s],
                                    sum_exp[s], target_logit[s], starts[s], 0.5);
      }
      return std::pair{losses, shards};
    };
    auto [whole_losses, whole_grad] = run({logits.clone()}, {0});
    auto [shard_losses, shard_grads] = run(
        {logits.narrow(1, 0, split).contiguous(), logits.narrow(1, split, V - split).contiguous()},
        {0, split});
    CHECK_CLOSE_TENSORS(shard_losses[0], whole_losses[0], (Tolerance{1e-14, 1e-13}),
                        "shard 0 losses");
    CHECK_CLOSE_TENSORS(shard_losses[1], whole_losses[0], (Tolerance{1e-14, 1e-13}),
                        "shard 1 losses");
    CHECK_CLOSE_TENSORS(shard_grads[0], whole_grad[0].narrow(1, 0, split).contiguous(),
                        (Tolerance{1e-15, 1e-13}), "shard 0 grad");
    CHECK_CLOSE_TENSORS(shard_grads[1], whole_grad[0].narrow(1, split, V - split).contiguous(),
                        (Tolerance{1e-15, 1e-13}), "shard 1 grad");
  }

}  // TEST_SUITE
