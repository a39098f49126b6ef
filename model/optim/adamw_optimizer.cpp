#include "model/optim/adamw_optimizer.h"

#include "core/check.h"
#include "core/memory_tag.h"
#include "core/profiler.h"

namespace titan::model {

AdamW::AdamW(std::vector<Parameter*> params, const AdamWConfig& config,
             std::vector<ParamHyper> hypers)
    : params_(std::move(params)), hypers_(std::move(hypers)), config_(config) {
  TT_CHECK(hypers_.empty() || hypers_.size() == params_.size(), "AdamW: ", hypers_.size(),
           " parameter hyper-parameters for ", params_.size(), " parameters");
  MemoryTagScope tag(MemoryCategory::OptimizerState);
  for (Parameter* p : params_) {
    if (p->frozen) {  // trained never: no moments
      state_.push_back({});
      continue;
    }
    DType dtype = p->value.dtype();
    if (config_.state_dtype == OptimizerStateDtype::BFloat16) {
      TT_CHECK(dtype == DType::F32, "AdamW: bf16 moments are kept beside f32 master weights, ",
               p->name, " is ", dtype_name(dtype));
      dtype = DType::BF16;
    }
    state_.push_back({Tensor::zeros(p->value.shape(), dtype, p->value.device()),
                      Tensor::zeros(p->value.shape(), dtype, p->value.device())});
  }
}

void AdamW::step(double lr) {
  profiler::Span span("adamw.step", "optimizer");
  ++step_;
  AdamWHyper hyper{lr, config_.beta1, config_.beta2, config_.eps, config_.weight_decay, step_};
  for (size_t i = 0; i < params_.size(); ++i) {
    if (params_[i]->frozen) continue;
    if (!hypers_.empty()) {
      hyper.lr = lr * hypers_[i].lr_scale;
      hyper.weight_decay = hypers_[i].weight_decay;
    }
    adamw_step(params_[i]->value, state_[i].exp_avg, state_[i].exp_avg_sq, params_[i]->grad, hyper);
  }
}

std::vector<OptimizerState> AdamW::state_of(size_t i) {
  if (params_.at(i)->frozen) return {};
  return {{".exp_avg", state_.at(i).exp_avg}, {".exp_avg_sq", state_.at(i).exp_avg_sq}};
}

int64_t AdamW::state_bytes() const {
  int64_t bytes = 0;
  for (const AdamWState& s : state_) {
    if (s.exp_avg.defined()) bytes += s.exp_avg.nbytes() + s.exp_avg_sq.nbytes();
  }
  return bytes;
}

}  // namespace titan::model
