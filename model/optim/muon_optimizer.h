// Muon (Jordan et al., 2024): momentum, orthogonalised by Newton–Schulz, on the hidden weight
// matrices, and AdamW on everything else — the embedding, the output, the norms — as the
// published recipe and torchtitan's and Megatron-LM's Muon do.
//
// For each hidden matrix W with gradient G (this rank's piece of both):
//   M ← β·M + (1−β)·G                                   the momentum buffer, elementwise
//   U ← (1−β)·G + β·M   (Nesterov; without it U ← M)
//   O ← NewtonSchulz5(U) for each of W's parts         on the whole part (whole_matrices.h)
//   W ← W·(1 − lr·wd) − lr·scale(rows, cols)·O
// A fused weight is orthogonalised part by part — wqkv as wq, wk and wv; w13 as w1 and w3 —
// since those are the matrices of the model (Megatron-LM's muon_split_qkv, torchtitan's
// separate wq/wk/wv).
//
// The update's scale: muon_config.h.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "model/optim/adamw_optimizer.h"
#include "model/optim/muon_config.h"
#include "model/optim/optimizer.h"
#include "model/optim/whole_matrices.h"

namespace titan::model {

// Whether Muon steps the parameter of this checkpoint name: a block's wqkv, wo, w13 or w2
// ("layers.3.attention.wqkv.weight"). Everything else takes AdamW.
bool is_muon_matrix(const std::string& name);

class Muon final : public Optimizer {
 public:
  // params: what the optimizer steps (FSDP's shards, or the tensor-parallel slices); hypers as
  // AdamW's, one per parameter or none; adamw: the AdamW beside it, and the state dtype of both
  // (AdamW's moments and Muon's momentum); whole: how the matrices' pieces meet.
  Muon(std::vector<Parameter*> params, const MuonConfig& muon, const AdamWConfig& adamw,
       std::vector<ParamHyper> hypers, std::shared_ptr<WholeMatrices> whole);

  const char* name() const override { return "Muon"; }
  void step(double lr) override;
  const std::vector<Parameter*>& params() const override { return params_; }
  std::vector<OptimizerState> state_of(size_t i) override;
  int64_t state_bytes() const override;

  // How many of params() Muon steps (the rest AdamW does).
  size_t muon_count() const { return muon_params_.size(); }

 private:
  struct Slot {
    bool muon = false;
    size_t index = 0;  // in muon_params_, or in adamw_'s params
  };

  std::vector<Parameter*> params_;
  std::vector<Slot> slots_;
  std::vector<Parameter*> muon_params_;
  std::vector<ParamHyper> muon_hypers_;
  std::vector<Tensor> momentum_;  // one per Muon parameter, its local shape
  std::unique_ptr<AdamW> adamw_;
  MuonConfig config_;
  std::shared_ptr<WholeMatrices> whole_;
};

}  // namespace titan::model
