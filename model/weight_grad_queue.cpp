#include "model/weight_grad_queue.h"

#include "core/check.h"
#include "core/profiler.h"

namespace titan::model {

void WeightGradQueue::defer(std::shared_ptr<LinearGemms> gemms, std::string fqn, Parameter* weight,
                            GemmOperand a, GemmOperand b) {
  TT_CHECK(weight != nullptr, "WeightGradQueue: ", fqn, " deferred with no weight");
  pending_.push_back(
      {std::move(gemms), std::move(fqn), weight, std::move(a), std::move(b), {}, {}});
}

void WeightGradQueue::defer_made(std::shared_ptr<LinearGemms> gemms, std::string fqn,
                                 Parameter* weight, LinearGemms::MakeOperand make_a,
                                 LinearGemms::MakeOperand make_b) {
  TT_CHECK(weight != nullptr && make_a && make_b, "WeightGradQueue: ", fqn,
           " deferred with no weight or operands");
  Pending p;
  p.gemms = std::move(gemms);
  p.fqn = std::move(fqn);
  p.weight = weight;
  p.make_a = std::move(make_a);
  p.make_b = std::move(make_b);
  pending_.push_back(std::move(p));
}

std::vector<Parameter*> WeightGradQueue::end_group(int group) {
  const size_t begin = groups_.empty() ? 0 : groups_.back().end;
  std::vector<Parameter*> weights;
  for (size_t i = begin; i < pending_.size(); ++i) weights.push_back(pending_[i].weight);
  if (!weights.empty()) groups_.push_back({group, pending_.size()});
  return weights;
}

void WeightGradQueue::run(ParamHooks& hooks) {
  const size_t closed = groups_.empty() ? 0 : groups_.back().end;
  TT_CHECK(closed == pending_.size(), "WeightGradQueue: ", pending_.size() - closed,
           " grad-weight GEMMs deferred outside any parameter group (end_group)");
  size_t i = 0;
  for (const Group& g : groups_) {
    hooks.before_weight_gradients(g.id);
    for (; i < g.end; ++i) {
      Pending& p = pending_[i];
      TT_PROFILE_SPAN(p.fqn + ".grad_weight", "gemm");
      TT_CHECK(p.weight->grad.defined(), "WeightGradQueue: ", p.fqn,
               " has no gradient to add into; its parameter hooks let it go before W");
      if (p.make_a) {
        p.gemms->grad_weight(p.weight->grad, p.make_a(), p.make_b());
      } else {
        p.gemms->run(GemmKind::GradWeight, p.weight->grad, p.a, p.b);
      }
      p = {};  // its operands go as soon as its GEMM has run
    }
    hooks.after_weight_gradients(g.id);
  }
  pending_.clear();
  groups_.clear();
}

}  // namespace titan::model
