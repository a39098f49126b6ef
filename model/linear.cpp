#include "model/linear.h"

#include "core/bf16.h"
#include "core/gemm.h"
#include "core/profiler.h"
#include "model/lora.h"
#include "model/producer_fusion.h"
#include "model/weight_grad_queue.h"

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

GemmOperand GemmOperand::row_block(int64_t start, int64_t end) const {
  TT_CHECK(row_blocks, "GEMM operand ", values,
           ": its scales are tiles across rows; a row block "
           "would cut them");
  TT_CHECK(0 <= start && start <= end && end <= rows(), "GEMM operand ", values, ": rows [", start,
           ", ", end, ")");
  GemmOperand block = *this;
  block.values = values.rows(start, end);
  if (row_scales.defined()) block.row_scales = row_scales.rows(start, end);
  if (adapter_rows.defined()) block.adapter_rows = adapter_rows.rows(start, end);
  return block;
}

std::vector<Tensor> GemmOperand::wire() const {
  std::vector<Tensor> tensors{values};
  if (row_scales.defined()) tensors.push_back(row_scales);
  if (adapter_rows.defined()) tensors.push_back(adapter_rows);
  return tensors;
}

GemmOperand GemmOperand::with_rows(int64_t rows) const {
  auto resized = [rows](const Tensor& t) {
    Shape shape = t.shape();
    shape[0] = rows;
    return Tensor::empty(shape, t.dtype(), t.device());
  };
  GemmOperand buffer = *this;
  buffer.is_the_input = false;
  buffer.values = resized(values);
  if (row_scales.defined()) buffer.row_scales = resized(row_scales);
  if (adapter_rows.defined()) buffer.adapter_rows = resized(adapter_rows);
  return buffer;
}

const char* gemm_kind_name(GemmKind gemm) {
  switch (gemm) {
    case GemmKind::Output: return "output";
    case GemmKind::GradInput: return "grad_input";
    case GemmKind::GradWeight: return "grad_weight";
  }
  return "?";
}

void high_precision_gemm(GemmKind kind, const Tensor& out, const Tensor& a, const Tensor& b) {
  switch (kind) {
    case GemmKind::Output: return titan::gemm(a, false, b, true, out);
    case GemmKind::GradInput: return titan::gemm(a, false, b, false, out);
    case GemmKind::GradWeight: return titan::gemm(a, true, b, false, out, 1.0, 1.0);
  }
}

GemmOperand HighPrecisionGemms::prepare_a(GemmKind, const Tensor& t) {
  const bool as_it_is = !bf16_operands_ || t.dtype() == DType::BF16;  // what operand() returns
  return as_it_is ? GemmOperand::the_input(t) : GemmOperand::plain(operand(t));
}

GemmOperand HighPrecisionGemms::prepare_b(GemmKind, const Tensor& t) {
  return GemmOperand::plain(operand(t));
}

void HighPrecisionGemms::run(GemmKind kind, const Tensor& out, const GemmOperand& a,
                             const GemmOperand& b) {
  high_precision_gemm(kind, out, a.values, b.values);
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
  GemmOperand prepare_a(GemmKind gemm, const Tensor& t) override {
    TT_PROFILE_SPAN(fqn_ + "." + gemm_kind_name(gemm) + ".prepare", "gemm");
    return inner_.prepare_a(gemm, t);
  }
  GemmOperand prepare_b(GemmKind gemm, const Tensor& t) override {
    TT_PROFILE_SPAN(fqn_ + "." + gemm_kind_name(gemm) + ".prepare", "gemm");
    return inner_.prepare_b(gemm, t);
  }
  void run(GemmKind gemm, const Tensor& out, const GemmOperand& a, const GemmOperand& b) override {
    TT_PROFILE_SPAN(fqn_ + "." + gemm_kind_name(gemm), "gemm");
    inner_.run(gemm, out, a, b);
  }
  std::string name() const override { return inner_.name(); }

 private:
  LinearGemms& inner_;
  const std::string& fqn_;
};

// The linear's GEMMs with the operands a producer already prepared (model/producer_fusion.h)
// taken as they are: a request for the same tensor gets them, any other is prepared as usual.
class ProducedGemms final : public LinearGemms {
 public:
  ProducedGemms(LinearGemms& inner, const ProducedOperands& produced)
      : inner_(inner), produced_(produced) {}
  GemmOperand prepare_a(GemmKind gemm, const Tensor& t) override {
    if (const GemmOperand* op = produced_.a_for(gemm, t)) return *op;
    return inner_.prepare_a(gemm, t);
  }
  GemmOperand prepare_b(GemmKind gemm, const Tensor& t) override {
    return inner_.prepare_b(gemm, t);
  }
  void run(GemmKind gemm, const Tensor& out, const GemmOperand& a, const GemmOperand& b) override {
    inner_.run(gemm, out, a, b);
  }
  std::string name() const override { return inner_.name(); }

 private:
  LinearGemms& inner_;
  const ProducedOperands& produced_;
};

// The linear's GEMMs with the grad-weight GEMM left in a queue (weight_grad_queue.h) instead of
// run: its operands are prepared now, on every rank in the usual order, and run later.
class DeferredWeightGemms final : public LinearGemms {
 public:
  DeferredWeightGemms(LinearGemms& now, std::shared_ptr<LinearGemms> later, const std::string& fqn,
                      Parameter& weight, WeightGradQueue& queue)
      : now_(now), later_(std::move(later)), fqn_(fqn), weight_(weight), queue_(queue) {}
  GemmOperand prepare_a(GemmKind gemm, const Tensor& t) override { return now_.prepare_a(gemm, t); }
  GemmOperand prepare_b(GemmKind gemm, const Tensor& t) override { return now_.prepare_b(gemm, t); }
  void run(GemmKind gemm, const Tensor& out, const GemmOperand& a, const GemmOperand& b) override {
    if (gemm == GemmKind::GradWeight) {
      // The whole weight's gradient (a grad-weight GEMM is never cut): W adds into the
      // gradient the weight has then (weight_grad_queue.h), which FSDP may make only then.
      check_whole_gradient(out);
      queue_.defer(later_, fqn_, &weight_, a, b);
    } else {
      now_.run(gemm, out, a, b);
    }
  }
  bool defers_grad_weight() const override { return true; }
  void grad_weight_of(const Tensor& dw, MakeOperand make_dy, MakeOperand make_x) override {
    check_whole_gradient(dw);
    queue_.defer_made(later_, fqn_, &weight_, std::move(make_dy), std::move(make_x));
  }
  std::string name() const override { return now_.name(); }

 private:
  void check_whole_gradient(const Tensor& dw) const {
    const bool whole = dw.defined() == weight_.grad.defined() &&
                       (!dw.defined() || dw.is_same(weight_.grad));
    TT_CHECK(whole, "linear ", fqn_, ": a deferred grad-weight GEMM into a part of its gradient");
  }

  LinearGemms& now_;
  std::shared_ptr<LinearGemms> later_;
  const std::string& fqn_;
  Parameter& weight_;
  WeightGradQueue& queue_;
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

Tensor Linear::forward(const Tensor& x, const ProducedOperands* produced) const {
  TT_CHECK(x.ndim() == 2, "linear ", fqn_, ": input must be 2-D [T, in], got ", x);
  // The linear's span holds its tensor-parallel collectives as well as its GEMM.
  TT_PROFILE_SPAN(fqn_ + ".forward", "model");
  ProfiledGemms profiled(*gemms_, fqn_);
  const ProducedOperands none;
  ProducedGemms gemms(profiled, produced != nullptr ? *produced : none);
  if (weight_->frozen) {
    FrozenWeightGemms frozen(gemms, adapter_.get());
    return style_->forward(x, weight_->value, frozen);
  }
  return style_->forward(x, weight_->value, gemms);
}

Tensor Linear::backward(const Tensor& dy, const Tensor& x, const ProducedOperands* produced) const {
  TT_CHECK(dy.ndim() == 2 && x.ndim() == 2, "linear ", fqn_, ": backward of dy ", dy, ", x ", x);
  TT_PROFILE_SPAN(fqn_ + ".backward", "model");
  ProfiledGemms profiled(*gemms_, fqn_);
  const ProducedOperands none;
  ProducedGemms gemms(profiled, produced != nullptr ? *produced : none);
  if (weight_->frozen) {
    // No weight gradient to defer: the adapter's (small) gradients are made now.
    FrozenWeightGemms frozen(gemms, adapter_.get());
    return style_->backward(dy, x, weight_->value, Tensor{}, frozen);
  }
  if (weight_grad_queue_ != nullptr) {
    DeferredWeightGemms deferred(gemms, gemms_, fqn_, *weight_, *weight_grad_queue_);
    return style_->backward(dy, x, weight_->value, weight_->grad, deferred);
  }
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
