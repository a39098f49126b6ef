#include "model/ops/adamw.h"

#include <cmath>

#include "core/bf16.h"
#include "core/dispatch.h"
#include "core/thread_pool.h"

namespace titan::model {

namespace {

// working (may be null): the bf16 copy of the updated param, rounded to nearest even.
template <class T>
void adamw_step_cpu(T* param, T* m, T* v, const T* grad, bf16_t* working, int64_t n,
                    const AdamWHyper& h) {
  const AdamWScalars<T> s = adamw_scalars<T>(h);
  parallel_for(n, kElementsPerChunk, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const T g = grad[i];
      m[i] = s.beta1 * m[i] + s.one_minus_beta1 * g;
      v[i] = s.beta2 * v[i] + s.one_minus_beta2 * g * g;
      const T denom = std::sqrt(v[i]) * s.inv_sqrt_bias2 + s.eps;
      param[i] = param[i] * s.decay - s.step_size * m[i] / denom;
      if (working != nullptr) working[i] = float_to_bf16(static_cast<float>(param[i]));
    }
  });
}

}  // namespace

void adamw_step(const Tensor& param, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                const Tensor& grad, const AdamWHyper& hyper, const Tensor& bf16_param) {
  TT_CHECK(hyper.step >= 1, "adamw_step: step is 1-based, got ", hyper.step);
  DType dt = param.dtype();
  check_tensor(param, "adamw param", param.shape(), dt);
  check_tensor(exp_avg, "adamw exp_avg", param.shape(), dt);
  check_tensor(exp_avg_sq, "adamw exp_avg_sq", param.shape(), dt);
  check_tensor(grad, "adamw grad", param.shape(), dt);
  [[maybe_unused]] Device device = common_device("adamw_step", {param, exp_avg, exp_avg_sq, grad});
  if (bf16_param.defined()) {
    TT_CHECK(dt == DType::F32,
             "adamw_step: the bf16 working copy is made from f32 master weights, got param ",
             param);
    check_tensor(bf16_param, "adamw bf16_param", param.shape(), DType::BF16);
    TT_CHECK(bf16_param.device() == device, "adamw_step: bf16_param on ", bf16_param.device(),
             ", param on ", device);
  }
#if TITAN_CUDA
  if (device.is_cuda()) {
    TT_CHECK(dt == DType::F32, "adamw_step on CUDA keeps f32 master weights and moments, got ",
             param, "; cast the optimizer state to f32");
    return adamw_step_cuda(param, exp_avg, exp_avg_sq, grad, hyper, bf16_param);
  }
#endif
  require_cpu("adamw_step", {param, exp_avg, exp_avg_sq, grad});
  bf16_t* working = bf16_param.defined() ? bf16_param.data<bf16_t>() : nullptr;
  visit_floating(dt, "adamw_step", [&]<class T>() {
    adamw_step_cpu<T>(param.data<T>(), exp_avg.data<T>(), exp_avg_sq.data<T>(), grad.data<T>(),
                      working, param.numel(), hyper);
  });
}

}  // namespace titan::model
