#include "support/gradcheck.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>

#include "core/cast.h"

namespace titan::testing {

namespace {

std::vector<Tensor> as_dtype(const std::vector<Tensor>& inputs, DType dtype) {
  std::vector<Tensor> out;
  for (const Tensor& t : inputs) out.push_back(is_floating(t.dtype()) ? cast(t, dtype) : t.clone());
  return out;
}

double weighted_sum(const Tensor& out, const Tensor& weights) {
  std::vector<double> o = to_doubles(out), w = to_doubles(weights);
  double sum = 0;
  for (size_t i = 0; i < o.size(); ++i) sum += o[i] * w[i];
  return sum;
}

}  // namespace

GradCheckResult check_gradients(const GradCase& c, DType dtype, Tolerance tol) {
  REQUIRE(c.inputs.size() == c.checked.size());
  // The output's shape, and the fixed weights w of L = Σ out ⊙ w.
  Tensor probe = c.forward(as_dtype(c.inputs, DType::F64));
  Tensor weights = random_tensor(probe.shape(), DType::F64, /*seed=*/1234, 1.0);

  std::vector<Tensor> typed = as_dtype(c.inputs, dtype);
  c.forward(typed);  // ops that keep state between forward and backward see a forward first
  std::vector<Tensor> grads = c.backward(typed, cast(weights, dtype));

  GradCheckResult worst;
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    if (!c.checked[i]) continue;
    const Tensor& x = c.inputs[i];
    REQUIRE_MESSAGE(grads[i].defined(), c.name << ": no gradient for input " << i);
    REQUIRE_MESSAGE(grads[i].shape() == x.shape(),
                    c.name << ": gradient " << grads[i] << " for input " << x);
    const int64_t n = x.numel();
    const int64_t stride = c.max_elements > 0 ? std::max<int64_t>(1, n / c.max_elements) : 1;
    std::vector<double> analytic = to_doubles(grads[i]);
    std::vector<double> numeric_values, analytic_values;
    for (int64_t e = 0; e < n; e += stride) {
      std::vector<Tensor> plus = as_dtype(c.inputs, DType::F64);
      std::vector<Tensor> minus = as_dtype(c.inputs, DType::F64);
      plus[i].data<double>()[e] += c.step;
      minus[i].data<double>()[e] -= c.step;
      double numeric =
          (weighted_sum(c.forward(plus), weights) - weighted_sum(c.forward(minus), weights)) /
          (2 * c.step);
      numeric_values.push_back(numeric);
      analytic_values.push_back(analytic[e]);
    }
    Tensor num = Tensor::from_vector(numeric_values, {static_cast<int64_t>(numeric_values.size())});
    Tensor ana =
        Tensor::from_vector(analytic_values, {static_cast<int64_t>(analytic_values.size())});
    Comparison cmp = compare(
        ana, num, tol,
        c.name + " d/d input " + std::to_string(i) + " (" + std::string(dtype_name(dtype)) + ")");
    CHECK_MESSAGE(cmp.ok, cmp.report);
    worst.max_abs = std::max(worst.max_abs, cmp.max_abs);
    worst.max_rel = std::max(worst.max_rel, cmp.max_rel);
  }
  return worst;
}

}  // namespace titan::testing
