#include "model/linear.h"

#include "core/bf16.h"
#include "core/gemm.h"
#include "core/profiler.h"

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

namespace {

// The linear's GEMMs as its style calls them, each in a profiler span named after the linear
// ("layers.0.attention.wqkv.grad_weight"): the style (local, tensor parallel) and the GEMMs
// (high precision, FP8) are chosen elsewhere and know no names, and this way every combination
// is profiled alike. The names are built only while recording.
class ProfiledGemms final : public LinearGemms {
 public:
  ProfiledGemms(LinearGemms& inner, const std::string& fqn) : inner_(inner), fqn_(fqn) {}
  void output(const Tensor& y, const Tensor& x, const Tensor& w) override {
    TT_PROFILE_SPAN(fqn_ + ".output", "gemm");
    inner_.output(y, x, w);
  }
  void grad_input(const Tensor& dx, const Tensor& dy, const Tensor& w) override {
    TT_PROFILE_SPAN(fqn_ + ".grad_input", "gemm");
    inner_.grad_input(dx, dy, w);
  }
  void grad_weight(const Tensor& dw, const Tensor& dy, const Tensor& x) override {
    TT_PROFILE_SPAN(fqn_ + ".grad_weight", "gemm");
    inner_.grad_weight(dw, dy, x);
  }
  std::string name() const override { return inner_.name(); }

 private:
  LinearGemms& inner_;
  const std::string& fqn_;
};

}  // namespace

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
  // The linear's span holds its tensor-parallel collectives as well as its GEMM.
  TT_PROFILE_SPAN(fqn_ + ".forward", "model");
  ProfiledGemms gemms(*gemms_, fqn_);
  return style_->forward(x, weight_->value, gemms);
}

Tensor Linear::backward(const Tensor& dy, const Tensor& x) const {
  TT_CHECK(dy.ndim() == 2 && x.ndim() == 2, "linear ", fqn_, ": backward of dy ", dy, ", x ", x);
  TT_PROFILE_SPAN(fqn_ + ".backward", "model");
  ProfiledGemms gemms(*gemms_, fqn_);
  return style_->backward(dy, x, weight_->value, weight_->grad, gemms);
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
