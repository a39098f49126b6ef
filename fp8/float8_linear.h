// FP8 linears: the LinearGemms that runs a linear's three GEMMs per a recipe, and the converter
// that gives it to the linears the filter selects. As torchtitan applies float8 as a model
// converter, parallelize() runs it after tensor parallelism has set each linear's slice (step
// 2), but nothing here knows about meshes or MPI: the one collective an FP8 GEMM needs, the
// tensorwise amax reduction over tp, reaches it through fp8/amax_reduction.h.
//
// Each GEMM quantizes both operands along its contraction axis and multiplies the FP8 values
// with fp32 accumulation (fp8/scaled_gemm.h), on the device the tensors are on — one code path
// for both:
//   CPU    f32 operands and outputs; the GEMM is emulated exactly.
//   CUDA   f32 or bf16 x, w, dy; y and dx written by cuBLASLt in their own dtype (bf16 in
//          training), dw accumulated in f32. Backward's transposed operands (wᵀ, dyᵀ, xᵀ) are
//          quantized straight from the untransposed tensors by fp8::quantize_transposed; only a
//          tensorwise operand whose amax is reduced over tp is quantized as is and its codes
//          byte-transposed (the same codes under one scale). The output GEMM uses fast
//          accumulation, the gradient GEMMs do not (fp8/recipe.h).
// A GEMM a recipe keeps in high precision (rowwise_with_gw_hp's weight gradient) goes through
// core/gemm in the operands' dtype with fp32 accumulation.
//
// Sharding. A scale must be the one a single rank would compute, or a mesh would not train like
// one rank. Two groups split what one rank would scale at once:
//   tp  a tp-sliced weight, a row-parallel input [T, in/tp] and a column-parallel gradient
//       [T, out/tp] each hold part of the tensor, so tensorwise amaxes go through the tp
//       AmaxReduction (a max all-reduce over the tp group, never the world). (FSDP gathers a
//       weight before its GEMMs, so its amax already covers the dp_shard group.)
//   cp  context parallelism splits each sequence's tokens [T/cp] over the cp group, so the
//       tensorwise amax of an activation (x, dy) goes through the activation AmaxReduction, one
//       max all-reduce over cp × tp, and cp's forward is one rank's: torchao scales each cp rank's
//       tokens on their own, which moved the first step's loss by 3e-5 of the debug model's
//       (docs/context_parallel.md).
// Other scales are local: a row never straddles ranks along the contraction axis except for
// row-parallel inputs, where — as torchao does — each rank scales its own part of the row, the
// same way in forward and backward. grad_weight's rowwise dyᵀ and xᵀ run along the tokens, so
// under cp each rank's row amax covers its tokens only; their scales are powers of two, and a
// scale twice as large leaves every normal e4m3 value as it was (only codes below e4m3's
// smallest normal could move), so a reduction would buy nothing: the debug model under cp 2
// trained bit for bit the same with one. Blockwise grad_weight blocks run along the tokens too,
// and a cp rank's tokens are two chunks of each sequence, so no reduction could give one rank's
// blocks. Data parallelism is not reduced over: other ranks' sequences are other batches, as
// gradient accumulation's micro-batches are.
#pragma once

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "fp8/amax_reduction.h"
#include "fp8/float8_producer_fusion.h"
#include "fp8/recipe.h"
#include "model/linear.h"
#include "model/transformer.h"

namespace titan::fp8 {

// Weights that FSDP all-gathered already in FP8 (float8.enable_fsdp_float8_all_gather; filled
// by fp8/float8_all_gather.h's codec): the gathered codes and their global tensorwise scale,
// keyed by the weight tensor FSDP materialised from them. A Float8Gemms finding its weight here
// uses these codes instead of quantizing the weight again.
class Float8WeightCache {
 public:
  void put(const Tensor& weight, Float8Tensor codes) { map_[weight.raw_data()] = std::move(codes); }
  void erase(const Tensor& weight) { map_.erase(weight.raw_data()); }
  const Float8Tensor* find(const Tensor& weight) const {
    auto it = map_.find(weight.raw_data());
    return it == map_.end() ? nullptr : &it->second;
  }

 private:
  std::unordered_map<const void*, Float8Tensor> map_;
};

class Float8Gemms final : public model::LinearGemms {
 public:
  // tp_amax: applied to every tensorwise amax — an f32 [1] tensor on the operands' device —
  // before its scale is computed (null: the operands are whole on this rank).
  // activation_amax: applied instead to an activation's, over the group its tokens and slices
  // are split over, cp × tp (null: the same group as tp_amax, the ranks holding whole
  // sequences). weight_cache: pre-quantized weights from FSDP's float8 all-gather (may be null).
  Float8Gemms(Recipe recipe, std::shared_ptr<AmaxReduction> tp_amax,
              std::shared_ptr<AmaxReduction> activation_amax = nullptr,
              std::shared_ptr<const Float8WeightCache> weight_cache = nullptr);

  // The operand level (model/linear.h): each operand quantized once along its GEMM's
  // contraction axis (x, dy as they are; wᵀ, dyᵀ, xᵀ from high precision), then the FP8 GEMM on
  // row blocks of it. A GEMM the recipe keeps in high precision takes its operands as they are.
  model::GemmOperand prepare_a(model::GemmKind gemm, const Tensor& t) override;
  model::GemmOperand prepare_b(model::GemmKind gemm, const Tensor& t) override;
  void run(model::GemmKind gemm, const Tensor& out, const model::GemmOperand& a,
           const model::GemmOperand& b) override;
  std::string name() const override { return "fp8 " + std::string(recipe_.name()); }
  // The fused producers of x and dy (fp8/float8_producer_fusion.h) for a producer writing
  // `output` on CUDA, where they save passes over HBM; on the CPU the producer runs alone and
  // prepare_a quantizes its output, the same bits (and the allocations the CPU's memory plan
  // replays), unless set_fuse_on_cpu(true) — for the tests that compare the two paths.
  model::ProducerFusion* producer_fusion(const Tensor& output) override;
  void set_fuse_on_cpu(bool fuse) { fuse_on_cpu_ = fuse; }
  const Recipe& recipe() const { return recipe_; }

 private:
  const GemmScaling& scaling(model::GemmKind gemm) const;
  // The reduction a tensorwise amax of this kind of operand goes through before its scale is
  // computed; null when the operand is whole on this rank (or its scaling is not tensorwise).
  AmaxReduction* amax_reduction(const OperandScaling& scaling, OperandKind kind) const;
  // x [rows, cols] quantized along its columns, and xᵀ [cols, rows] along x's rows.
  Float8Tensor quantize(const Tensor& x, const OperandScaling& scaling, OperandKind kind) const;
  Float8Tensor quantize_transposed(const Tensor& x, const OperandScaling& scaling,
                                   OperandKind kind) const;
  // From the FP8 all-gather, on the CPU and on CUDA alike.
  const Float8Tensor* gathered_weight(const Tensor& w) const;

  Recipe recipe_;
  std::shared_ptr<AmaxReduction> tp_amax_;
  std::shared_ptr<AmaxReduction> activation_amax_;
  std::shared_ptr<const Float8WeightCache> weight_cache_;
  Float8ProducerFusion fusion_;
  bool fuse_on_cpu_ = false;
};

// A quantized operand as a model::GemmOperand that the styles can cut into row blocks (a row
// block of a rowwise or 1×128 operand carries its rows' scales).
model::GemmOperand to_gemm_operand(Float8Tensor q);

struct Float8Options {
  bool enabled = false;
  RecipeKind recipe = RecipeKind::Tensorwise;
  std::vector<std::string> filter_fqns = {"output"};
  bool auto_filter_small_kn = false;
  // Set by parallelize() when FSDP all-gathers the converted weights in FP8.
  std::shared_ptr<const Float8WeightCache> weight_cache;
};

struct Float8Conversion {
  std::vector<std::string> converted;      // linear names
  std::vector<model::Parameter*> weights;  // their weights
  std::vector<std::string> auto_filtered;  // one warning line each: the layer, dims and why
};

// Converts the selected linears, after tensor parallelism has given their weights their tp
// slices. A linear is skipped when its name contains any filter string (torchao's module
// filter). A converted linear's FP8 GEMM dims after tp sharding must be multiples of 16
// (cuBLASLt's FP8 requirement): otherwise InputError naming the layer, its dims and the tp
// degree — or, with auto_filter_small_kn, the layer stays in high precision with a warning, as
// do layers too small for FP8 to win (see the .cpp). tp_amax: the tp group's amax reduction
// (null without tensor parallelism); activation_amax: the cp × tp group's (null without
// context parallelism).
Float8Conversion convert_to_float8(model::Transformer& model, const Float8Options& options,
                                   std::shared_ptr<AmaxReduction> tp_amax,
                                   std::shared_ptr<AmaxReduction> activation_amax = nullptr);

}  // namespace titan::fp8
