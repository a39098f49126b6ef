#include "model/ops/adamw.h"

#include <cmath>

#include "core/dispatch.h"

namespace titan::model {

namespace {

template <class T>
void adamw_step_cpu(T* param, T* m, T* v, const T* grad, int64_t n, const AdamWHyper& h) {
  const double bias1 = 1.0 - std::pow(h.beta1, static_cast<double>(h.step));
  const double bias2 = 1.0 - std::pow(h.beta2, static_cast<double>(h.step));
  const T step_size = static_cast<T>(h.lr / bias1);
  const T inv_sqrt_bias2 = static_cast<T>(1.0 / std::sqrt(bias2));
  const T decay = static_cast<T>(1.0 - h.lr * h.weight_decay);
  const T b1 = static_cast<T>(h.beta1), b2 = static_cast<T>(h.beta2), eps = static_cast<T>(h.eps);
  for (int64_t i = 0; i < n; ++i) {
    const T g = grad[i];
    m[i] = b1 * m[i] + (T(1) - b1) * g;
    v[i] = b2 * v[i] + (T(1) - b2) * g * g;
    const T denom = std::sqrt(v[i]) * inv_sqrt_bias2 + eps;
    param[i] = param[i] * decay - step_size * m[i] / denom;
  }
}

}  // namespace

void adamw_step(const Tensor& param, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                const Tensor& grad, const AdamWHyper& hyper) {
  TT_CHECK(hyper.step >= 1, "adamw_step: step is 1-based, got ", hyper.step);
  DType dt = param.dtype();
  check_tensor(param, "adamw param", param.shape(), dt);
  check_tensor(exp_avg, "adamw exp_avg", param.shape(), dt);
  check_tensor(exp_avg_sq, "adamw exp_avg_sq", param.shape(), dt);
  check_tensor(grad, "adamw grad", param.shape(), dt);
  require_cpu("adamw_step", {param, exp_avg, exp_avg_sq, grad});
  visit_floating(dt, "adamw_step", [&]<class T>() {
    adamw_step_cpu<T>(param.data<T>(), exp_avg.data<T>(), exp_avg_sq.data<T>(), grad.data<T>(),
                      param.numel(), hyper);
  });
}

}  // namespace titan::model
