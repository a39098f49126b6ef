// AdamW over a list of parameters: fp32 master weights and moments for the values this rank
// holds (its shard, once FSDP shards them).
//
// On the CPU the parameters already are fp32 (or f64 in gradient checks), so the master weight
// is the parameter's own tensor; a CUDA run keeps a separate fp32 master and writes the bf16
// working copy from it.
#pragma once

#include <vector>

#include "core/tensor.h"
#include "model/ops/adamw.h"
#include "model/optim/optimizer.h"
#include "model/optim/optimizer_state_dtype.h"
#include "model/optim/param_groups.h"
#include "model/parameter.h"

namespace titan::model {

struct AdamWConfig {
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;
  OptimizerStateDtype state_dtype = OptimizerStateDtype::Float32;
};

struct AdamWState {
  Tensor exp_avg;     // m, the parameter's local shape; its dtype, or bf16 (state_dtype)
  Tensor exp_avg_sq;  // v
};

class AdamW final : public Optimizer {
 public:
  // `hypers`, one per parameter (optimizer.groups, model/optim/param_groups.h), scale the
  // learning rate and set the weight decay of each; empty: config.weight_decay and the
  // scheduled rate for every parameter.
  AdamW(std::vector<Parameter*> params, const AdamWConfig& config,
        std::vector<ParamHyper> hypers = {});

  const char* name() const override { return "AdamW"; }
  void step(double lr) override;
  const std::vector<Parameter*>& params() const override { return params_; }
  std::vector<OptimizerState> state_of(size_t i) override;
  int64_t state_bytes() const override;

  std::vector<AdamWState>& state() { return state_; }

 private:
  std::vector<Parameter*> params_;
  std::vector<AdamWState> state_;
  std::vector<ParamHyper> hypers_;
  AdamWConfig config_;
};

}  // namespace titan::model
