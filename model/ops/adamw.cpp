#include "model/ops/adamw.h"

#include <cmath>
#include <type_traits>

#include "core/bf16.h"
#include "core/dispatch.h"
#include "core/thread_pool.h"

namespace titan::model {

namespace {

// A moment as the update reads and writes it: T itself, or bf16 widened to f32 and rounded back.
template <class T, class Stored>
T load_moment(Stored x) {
  if constexpr (std::is_same_v<Stored, bf16_t>) {
    return bf16_to_float(x);
  } else {
    return x;
  }
}
template <class Stored, class T>
Stored store_moment(T x) {
  if constexpr (std::is_same_v<Stored, bf16_t>) {
    return float_to_bf16(x);
  } else {
    return x;
  }
}

// working (may be null): the bf16 copy of the updated param, rounded to nearest even. M: the
// moments' stored type, T or bf16_t (then T is float).
template <class T, class M>
void adamw_step_cpu(T* param, M* m, M* v, const T* grad, bf16_t* working, int64_t n,
                    const AdamWHyper& h) {
  const AdamWScalars<T> s = adamw_scalars<T>(h);
  parallel_for(n, kElementsPerChunk, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const T g = grad[i];
      const T mi = s.beta1 * load_moment<T>(m[i]) + s.one_minus_beta1 * g;
      const T vi = s.beta2 * load_moment<T>(v[i]) + s.one_minus_beta2 * g * g;
      m[i] = store_moment<M>(mi);
      v[i] = store_moment<M>(vi);
      const T denom = std::sqrt(vi) * s.inv_sqrt_bias2 + s.eps;
      param[i] = param[i] * s.decay - s.step_size * mi / denom;
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
  const DType moments = exp_avg.dtype();
  TT_CHECK(moments == dt || (moments == DType::BF16 && dt == DType::F32),
           "adamw_step: the moments are ", dtype_name(moments), " beside a ", dtype_name(dt),
           " param; they are the param's dtype, or bf16 beside f32");
  check_tensor(exp_avg, "adamw exp_avg", param.shape(), moments);
  check_tensor(exp_avg_sq, "adamw exp_avg_sq", param.shape(), moments);
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
    TT_CHECK(dt == DType::F32, "adamw_step on CUDA keeps f32 master weights, got ", param,
             "; cast the optimizer state to f32");
    return adamw_step_cuda(param, exp_avg, exp_avg_sq, grad, hyper, bf16_param);
  }
#endif
  require_cpu("adamw_step", {param, exp_avg, exp_avg_sq, grad});
  bf16_t* working = bf16_param.defined() ? bf16_param.data<bf16_t>() : nullptr;
  if (moments == DType::BF16) {
    adamw_step_cpu<float, bf16_t>(param.data<float>(), exp_avg.data<bf16_t>(),
                                  exp_avg_sq.data<bf16_t>(), grad.data<float>(), working,
                                  param.numel(), hyper);
    return;
  }
  visit_floating(dt, "adamw_step", [&]<class T>() {
    adamw_step_cpu<T, T>(param.data<T>(), exp_avg.data<T>(), exp_avg_sq.data<T>(),
                         grad.data<T>(), working, param.numel(), hyper);
  });
}

}  // namespace titan::model
