// The CPU ops beside the GEMMs run on core/thread_pool.h's threads in fixed chunks: each gives
// the same bits on one thread and on two, on inputs of several chunks, reductions included
// (RMSNorm's weight gradient, the gradient norm's sums of squares).
#include <doctest/doctest.h>

#include <functional>
#include <vector>

#include "core/thread_pool.h"
#include "model/ops/adamw.h"
#include "model/ops/cross_entropy.h"
#include "model/ops/rmsnorm.h"
#include "model/ops/rope.h"
#include "model/ops/swiglu.h"
#include "model/ops/tensor_math.h"
#include "support/tensor_testing.h"

using namespace titan;
using namespace titan::model;
using titan::testing::bitwise_equal;
using titan::testing::random_tensor;

namespace {

// run() on one thread and on two: the tensors it returns, bit for bit.
void check_threads(const char* what, const std::function<std::vector<Tensor>()>& run) {
  CAPTURE(what);
  const int threads = cpu_threads();
  set_cpu_threads(1);
  const std::vector<Tensor> one = run();
  set_cpu_threads(2);
  const std::vector<Tensor> two = run();
  set_cpu_threads(threads);
  REQUIRE(one.size() == two.size());
  for (size_t i = 0; i < one.size(); ++i) CHECK(bitwise_equal(one[i], two[i]));
}

}  // namespace

TEST_SUITE("fast") {
  TEST_CASE("CPU ops: the same bits on one thread and on two") {
    const int64_t T = 300, D = 512, F = 384, V = 700;  // several 32K-element chunks each
    const Tensor x = random_tensor({T, D}, DType::F32, 1);
    const Tensor weight = random_tensor({D}, DType::F32, 2);
    const Tensor dy = random_tensor({T, D}, DType::F32, 3);
    check_threads("rmsnorm", [&] {
      Tensor y = Tensor::empty({T, D}, DType::F32), rstd = Tensor::empty({T}, DType::F32);
      Tensor dx = Tensor::empty({T, D}, DType::F32), dw = Tensor::zeros({D}, DType::F32);
      rmsnorm_forward(y, rstd, x, weight, 1e-5);
      rmsnorm_backward(dx, dw, dy, x, weight, rstd);
      return std::vector<Tensor>{y, rstd, dx, dw};
    });
    const Tensor h13 = random_tensor({T, 2 * F}, DType::F32, 4);
    const Tensor dout = random_tensor({T, F}, DType::F32, 5);
    check_threads("swiglu", [&] {
      Tensor out = Tensor::empty({T, F}, DType::F32), dh = Tensor::empty({T, 2 * F}, DType::F32);
      swiglu_forward(out, h13);
      swiglu_backward(dh, dout, h13);
      return std::vector<Tensor>{out, dh};
    });
    check_threads("rope", [&] {
      Tensor cos = Tensor::empty({100, 32}, DType::F32), sin = Tensor::empty({100, 32}, DType::F32);
      rope_tables(cos, sin, 64, 500000.0, {});
      Tensor r = x.clone();
      rope_forward(r, cos, sin, 100, 8, 64);
      return std::vector<Tensor>{r};
    });
    const Tensor logits = random_tensor({T, V}, DType::F32, 6, 3.0);
    const Tensor targets = testing::random_tokens(1, T, V, 7).view({T});
    check_threads("cross entropy", [&] {
      Tensor m = Tensor::empty({T}, DType::F32), s = Tensor::empty({T}, DType::F32),
             t = Tensor::empty({T}, DType::F32), loss = Tensor::empty({T}, DType::F32),
             dl = Tensor::empty({T, V}, DType::F32);
      cross_entropy_row_max(m, logits);
      cross_entropy_row_sums(s, t, logits, targets, m, 0);
      cross_entropy_loss_and_grad(loss, dl, logits, targets, m, s, t, 0, 1.0 / T);
      return std::vector<Tensor>{m, s, t, loss, dl};
    });
    check_threads("adamw, accumulate, scale and sums of squares", [&] {
      Tensor p = x.clone(), m = dy.clone(), v = x.clone(), g = dy.clone();
      scale_inplace(v, 0.5);
      accumulate(v, v);
      adamw_step(p, m, v, g, AdamWHyper{1e-3, 0.9, 0.95, 1e-8, 0.1, 3});
      const std::vector<double> sums = sums_of_squares({p, m, weight});
      return std::vector<Tensor>{p, m, v, Tensor::from_vector(sums, {3})};
    });
  }
}
