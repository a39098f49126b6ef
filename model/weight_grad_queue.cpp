#include "model/weight_grad_queue.h"

#include "core/profiler.h"

namespace titan::model {

void WeightGradQueue::defer(std::shared_ptr<LinearGemms> gemms, std::string fqn, Tensor dw,
                            GemmOperand a, GemmOperand b) {
  pending_.push_back({std::move(gemms), std::move(fqn), std::move(dw), std::move(a), std::move(b)});
}

void WeightGradQueue::run() {
  for (Pending& p : pending_) {
    TT_PROFILE_SPAN(p.fqn + ".grad_weight", "gemm");
    p.gemms->run(GemmKind::GradWeight, p.dw, p.a, p.b);
  }
  pending_.clear();
}

}  // namespace titan::model
