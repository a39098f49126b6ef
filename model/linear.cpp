#include "model/linear.h"

#include "core/bf16.h"
#include "core/gemm.h"

namespace titan::model {

Tensor HighPrecisionGemms::operand(const Tensor& t) const {
  // bf16 operands (CUDA's mixed precision) are already what the emulation rounds to.
  if (!bf16_operands_ || t.dtype() == DType::BF16) return t;
  TT_CHECK(t.dtype() == DType::F32, "bf16 emulation of a ", t, " operand: f32 only");
  Tensor rounded = t.clone();
  float* p = rounded.data<float>();
  for (int64_t i = 0; i < rounded.numel(); ++i) p[i] = round_to_bf16(p[i]);
  return rounded;
}

void HighPrecisionGemms::output(const Tensor& y, const Tensor& x, const Tensor& w) {
  gemm(operand(x), false, operand(w), true, y);
}

void HighPrecisionGemms::grad_input(const Tensor& dx, const Tensor& dy, const Tensor& w) {
  gemm(operand(dy), false, operand(w), false, dx);
}

void HighPrecisionGemms::grad_weight(const Tensor& dw, const Tensor& dy, const Tensor& x) {
  gemm(operand(dy), true, operand(x), false, dw, 1.0, 1.0);
}

Tensor LocalLinear::forward(const Tensor& x, const Tensor& w, LinearGemms& gemms) {
  Tensor y = Tensor::empty({x.size(0), w.size(0)}, x.dtype(), x.device());
  gemms.output(y, x, w);
  return y;
}

Tensor LocalLinear::backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& dw,
                             LinearGemms& gemms) {
  Tensor dx = Tensor::empty(x.shape(), x.dtype(), x.device());
  gemms.grad_input(dx, dy, w);
  gemms.grad_weight(dw, dy, x);
  return dx;
}

Linear::Linear(std::string fqn, Parameter* weight)
    : fqn_(std::move(fqn)),
      weight_(weight),
      style_(std::make_shared<LocalLinear>()),
      gemms_(std::make_shared<HighPrecisionGemms>()) {
  TT_CHECK(weight_ != nullptr && weight_->shape.ndim() == 2, "linear ", fqn_,
           " needs a 2-D [out, in] weight");
}

Tensor Linear::forward(const Tensor& x) const {
  TT_CHECK(x.ndim() == 2, "linear ", fqn_, ": input must be 2-D [T, in], got ", x);
  return style_->forward(x, weight_->value, *gemms_);
}

Tensor Linear::backward(const Tensor& dy, const Tensor& x) const {
  TT_CHECK(dy.ndim() == 2 && x.ndim() == 2, "linear ", fqn_, ": backward of dy ", dy, ", x ", x);
  return style_->backward(dy, x, weight_->value, weight_->grad, *gemms_);
}

void Linear::set_style(std::shared_ptr<LinearStyle> style) {
  TT_CHECK(style != nullptr, "linear ", fqn_, ": null style");
  style_ = std::move(style);
}

void Linear::set_gemms(std::shared_ptr<LinearGemms> gemms) {
  TT_CHECK(gemms != nullptr, "linear ", fqn_, ": null gemms");
  gemms_ = std::move(gemms);
}

}  // namespace titan::model
