#include "model/optim/muon_optimizer.h"

#include <algorithm>
#include <cmath>
#include <regex>

#include "core/cast.h"
#include "core/check.h"
#include "core/memory_tag.h"
#include "core/profiler.h"
#include "model/ops/newton_schulz.h"
#include "model/ops/tensor_math.h"

namespace titan::model {

double muon_update_scale(MuonScale scale, int64_t rows, int64_t cols) {
  switch (scale) {
    case MuonScale::MatchAdamW:
      return 0.2 * std::sqrt(static_cast<double>(std::max(rows, cols)));
    case MuonScale::Shape:
      return std::sqrt(std::max(1.0, static_cast<double>(rows) / static_cast<double>(cols)));
  }
  return 1.0;
}

bool is_muon_matrix(const std::string& name) {
  static const std::regex hidden(
      R"(^layers\.[0-9]+\.(attention\.(wqkv|wo)|feed_forward\.(w13|w2))\.weight$)");
  return std::regex_match(name, hidden);
}

Muon::Muon(std::vector<Parameter*> params, const MuonConfig& muon, const AdamWConfig& adamw,
           std::vector<ParamHyper> hypers, std::shared_ptr<WholeMatrices> whole)
    : params_(std::move(params)),
      config_(muon),
      whole_(std::move(whole)) {
  TT_CHECK(hypers.empty() || hypers.size() == params_.size(), "Muon: ", hypers.size(),
           " parameter hyper-parameters for ", params_.size(), " parameters");
  TT_CHECK(whole_ != nullptr, "Muon: no way to reach the whole matrices");
  TT_CHECK(config_.ns_steps >= 1, "Muon: ", config_.ns_steps, " Newton-Schulz steps");
  MemoryTagScope tag(MemoryCategory::OptimizerState);
  std::vector<Parameter*> others;
  std::vector<ParamHyper> other_hypers;
  for (size_t i = 0; i < params_.size(); ++i) {
    Parameter* p = params_[i];
    const ParamHyper hyper = hypers.empty() ? ParamHyper{1.0, adamw.weight_decay, -1} : hypers[i];
    // A frozen matrix goes with the others, where AdamW keeps nothing for it.
    if (is_muon_matrix(p->name) && p->trained()) {
      DType dtype = p->value.dtype();
      if (adamw.state_dtype == OptimizerStateDtype::BFloat16) {
        TT_CHECK(dtype == DType::F32, "Muon: a bf16 momentum is kept beside f32 master weights, ",
                 p->name, " is ", dtype_name(dtype));
        dtype = DType::BF16;
      }
      slots_.push_back({true, muon_params_.size()});
      muon_params_.push_back(p);
      muon_hypers_.push_back(hyper);
      momentum_.push_back(Tensor::zeros(p->value.shape(), dtype, p->value.device()));
    } else {
      slots_.push_back({false, others.size()});
      others.push_back(p);
      other_hypers.push_back(hyper);
    }
  }
  adamw_ = std::make_unique<AdamW>(std::move(others), adamw, std::move(other_hypers));
}

void Muon::step(double lr) {
  profiler::Span span("muon.step", "optimizer");
  ++step_;
  adamw_->set_steps_taken(step_ - 1);  // AdamW's bias corrections count the same steps
  adamw_->step(lr);

  // The momentum and the Nesterov update, elementwise on this rank's piece, the update written
  // over the gradient (as Jordan's reference does: the gradient is not read again before the
  // next step's zero_grad), so the step holds no second copy of the matrices. Each line is one
  // op of model/ops/tensor_math.h, rounded once, on the CPU and on CUDA alike.
  const double beta = config_.momentum;
  std::vector<Tensor> updates;
  for (size_t j = 0; j < muon_params_.size(); ++j) {
    const Parameter& p = *muon_params_[j];
    const Tensor& stored = momentum_[j];
    const Tensor m = stored.dtype() == p.grad.dtype() ? stored : cast(stored, p.grad.dtype());
    const Tensor& u = p.grad;
    scale_inplace(u, 1.0 - beta);  // (1−β)·G
    scale_inplace(m, beta);
    accumulate(m, u);  // M = β·M + (1−β)·G
    if (config_.nesterov) {
      const Tensor beta_m = m.clone();
      scale_inplace(beta_m, beta);
      accumulate(u, beta_m);  // U = (1−β)·G + β·M
    } else {
      u.copy_from(m);
    }
    if (m.dtype() != stored.dtype()) cast_into(stored, m);
    updates.push_back(u);
  }

  // Orthogonalised whole, part by part, and scaled for each part's shape.
  {
    profiler::Span ns("muon.newton_schulz", "optimizer");
    std::vector<const Parameter*> matrices(muon_params_.begin(), muon_params_.end());
    whole_->transform(matrices, updates, [this](const Parameter& p, const Tensor& whole) {
      int64_t row = 0;
      for (const ParamPart& part : p.parts) {
        const Tensor rows = whole.rows(row, row + part.rows);
        newton_schulz5(rows, rows, config_.ns_steps);
        scale_inplace(rows, muon_update_scale(config_.scale, part.rows, p.cols()));
        row += part.rows;
      }
      TT_CHECK(row == p.shape[0], "Muon: the parts of ", p.name, " cover ", row, " of ",
               p.shape[0], " rows");
    });
  }

  // W ← W·(1 − lr·wd) − lr·O.
  for (size_t j = 0; j < muon_params_.size(); ++j) {
    const Parameter& p = *muon_params_[j];
    const double rate = lr * muon_hypers_[j].lr_scale;
    scale_inplace(p.value, 1.0 - rate * muon_hypers_[j].weight_decay);
    scale_inplace(updates[j], -rate);
    accumulate(p.value, updates[j]);
  }
}

std::vector<OptimizerState> Muon::state_of(size_t i) {
  const Slot& slot = slots_.at(i);
  if (slot.muon) return {{".momentum_buffer", momentum_[slot.index]}};
  return adamw_->state_of(slot.index);
}

int64_t Muon::state_bytes() const {
  int64_t bytes = adamw_->state_bytes();
  for (const Tensor& m : momentum_) bytes += m.nbytes();
  return bytes;
}

}  // namespace titan::model
