#include "model/lora.h"

#include <cmath>
#include <string>

#include "core/check.h"
#include "core/gemm.h"

namespace titan::model {

std::string adapter_part_name(const std::string& base_part, const char* which) {
  const std::string suffix = ".weight";
  TT_CHECK(base_part.size() > suffix.size() &&
               base_part.compare(base_part.size() - suffix.size(), suffix.size(), suffix) == 0,
           "LoRA: base weight ", base_part, " is not named <module>.weight");
  return base_part.substr(0, base_part.size() - suffix.size()) + ".lora_" + which + suffix;
}

DeclaredAdapter declare_adapter(const Parameter& base, int64_t rank, DType dtype) {
  TT_CHECK(base.shape.ndim() == 2 && rank > 0, "LoRA on ", base.name, ": rank ", rank);
  const int64_t in = base.shape[1];
  const InitSpec a_init = InitSpec::normal(1.0 / std::sqrt(3.0 * static_cast<double>(in)));
  std::vector<ParamPart> a_parts, b_parts;
  for (const ParamPart& part : base.parts) {
    a_parts.push_back({adapter_part_name(part.name, "a"), rank, a_init});
    b_parts.push_back({adapter_part_name(part.name, "b"), part.rows, InitSpec::zeros()});
  }
  DeclaredAdapter declared{
      declare_fused_parameter(adapter_part_name(base.name, "a"), std::move(a_parts), in, dtype),
      declare_fused_parameter(adapter_part_name(base.name, "b"), std::move(b_parts), rank, dtype)};
  declared.a.adapter = declared.b.adapter = true;
  return declared;
}

LowRankAdapter::Rows LowRankAdapter::local_rows(int64_t p) const {
  const bool split = b->slice.dim == 0 && b->slice.count > 1;
  Rows rows;
  for (int64_t i = 0; i <= p; ++i) {
    const int64_t count = b->parts[static_cast<size_t>(i)].rows / (split ? b->slice.count : 1);
    if (i < p) rows.begin += count;
    rows.count = count;
  }
  return rows;
}

Tensor LowRankAdapter::project_input(const Tensor& x) const {
  Tensor u = Tensor::empty({x.size(0), a->value.size(0)}, x.dtype(), x.device());
  if (x.size(0) > 0) gemm(x, false, a->value, true, u);
  return u;
}

Tensor LowRankAdapter::project_grad(const Tensor& dy) const {
  Tensor v = Tensor::empty({dy.size(0), part_count() * rank}, dy.dtype(), dy.device());
  if (dy.size(0) == 0) return v;
  for (int64_t p = 0; p < part_count(); ++p) {
    const Rows r = local_rows(p);
    gemm(dy.narrow(1, r.begin, r.count), false, b->value.narrow(0, r.begin, r.count), false,
         v.narrow(1, p * rank, rank));
  }
  return v;
}

void LowRankAdapter::add_output(const Tensor& y, const Tensor& u) const {
  if (y.size(0) == 0) return;
  for (int64_t p = 0; p < part_count(); ++p) {
    const Rows r = local_rows(p);
    gemm(u.narrow(1, p * rank, rank), false, b->value.narrow(0, r.begin, r.count), true,
         y.narrow(1, r.begin, r.count), scale, 1.0);
  }
}

void LowRankAdapter::add_grad_input(const Tensor& dx, const Tensor& v) const {
  if (dx.size(0) > 0) gemm(v, false, a->value, false, dx, scale, 1.0);
}

void LowRankAdapter::accumulate_grads(const Tensor& dy, const Tensor& x) const {
  TT_CHECK(a->grad.defined() && b->grad.defined(), "LoRA: ", a->name, " or ", b->name,
           " has no gradient storage in backward");
  if (x.size(0) == 0) return;
  const Tensor u = project_input(x);
  const Tensor v = project_grad(dy);
  gemm(v, true, x, false, a->grad, scale, 1.0);
  for (int64_t p = 0; p < part_count(); ++p) {
    const Rows r = local_rows(p);
    gemm(dy.narrow(1, r.begin, r.count), true, u.narrow(1, p * rank, rank), false,
         b->grad.narrow(0, r.begin, r.count), scale, 1.0);
  }
}

GemmOperand FrozenWeightGemms::prepare_a(GemmKind gemm, const Tensor& t) {
  // No grad-weight GEMM runs on a frozen weight: the adapter reads dy as it is.
  if (gemm == GemmKind::GradWeight) return GemmOperand::the_input(t);
  GemmOperand op = inner_.prepare_a(gemm, t);
  if (adapter_ != nullptr) {
    op.adapter_rows =
        gemm == GemmKind::Output ? adapter_->project_input(t) : adapter_->project_grad(t);
  }
  return op;
}

GemmOperand FrozenWeightGemms::prepare_b(GemmKind gemm, const Tensor& t) {
  if (gemm == GemmKind::GradWeight) return GemmOperand::the_input(t);
  return inner_.prepare_b(gemm, t);
}

void FrozenWeightGemms::run(GemmKind gemm, const Tensor& out, const GemmOperand& a,
                            const GemmOperand& b) {
  switch (gemm) {
    case GemmKind::Output:
      inner_.run(gemm, out, a, b);
      if (adapter_ != nullptr) adapter_->add_output(out, a.adapter_rows);
      break;
    case GemmKind::GradInput:
      inner_.run(gemm, out, a, b);
      if (adapter_ != nullptr) adapter_->add_grad_input(out, a.adapter_rows);
      break;
    case GemmKind::GradWeight:
      if (adapter_ != nullptr) adapter_->accumulate_grads(a.values, b.values);
      break;
  }
}

void follow_base_slice(LowRankAdapter& adapter, const ParamSlice& base) {
  adapter.a->slice = {};
  adapter.b->slice = {};
  if (base.count <= 1) return;
  if (base.dim == 0) adapter.b->slice = base;  // column-parallel: W's rows, B's rows
  if (base.dim == 1) adapter.a->slice = base;  // row-parallel: W's columns, A's columns
}

}  // namespace titan::model
