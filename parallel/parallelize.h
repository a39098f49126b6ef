// parallelize(): turns a declared (storage-less) Transformer into this rank's part of a model
// on the device mesh, in torchtitan's order (docs/architecture.md#decision-2):
//
//   1. tensor parallel: the plan table below gives each linear its style and each parameter its
//      tp slice; the model gets the tp group for loss parallel and the vocab-sharded embedding
//   2. FP8: fp8::convert_to_float8 gives the linears the filter selects Float8Gemms for the
//      configured recipe, with the tp group's amax reduction (parallel/amax_reduction.h)
//   3. (activation checkpointing is already a per-block policy of the model)
//   4. context parallel (cp > 1): every block's attention runs over the cp group
//      (ContextParallelGroup, ring or all-gather); the split of the tokens is the caller's
//   5. data parallel: FSDP (dp_shard × cp > 1, HSDP with dp_replicate) or replication (DDP), which
//      allocates storage and becomes the model's ParamHooks; with the float8 all-gather, FSDP
//      moves the converted weights through fp8's Float8AllGatherCodec
//
// After it, init_weights() on the returned DataParallel gives every mesh bit-identical
// starting weights.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "fp8/float8_linear.h"
#include "model/config.h"
#include "model/transformer.h"
#include "parallel/context_parallel.h"
#include "parallel/data_parallel.h"
#include "parallel/device_mesh.h"
#include "parallel/pipeline_gradient_reduction.h"

namespace titan::parallel {

enum class TpStyle { ColumnParallel, RowParallel };

// torchtitan's Llama plan, keyed by the end of the linear's name ("layers.3.attention.wqkv").
struct TpPlanEntry {
  std::string_view layer;
  TpStyle style;
};
inline constexpr TpPlanEntry kLlamaTpPlan[] = {
    {"attention.wqkv", TpStyle::ColumnParallel},    // all-gather → GEMM: local q, k, v heads
    {"attention.wo", TpStyle::RowParallel},         // GEMM → reduce-scatter to sequence shards
    {"feed_forward.w13", TpStyle::ColumnParallel},  // all-gather → GEMM: local w1 and w3 slices
    {"feed_forward.w2", TpStyle::RowParallel},      // GEMM → reduce-scatter
    {"output", TpStyle::ColumnParallel},            // vocab-sharded logits, loss parallel
};

struct ParallelizeOptions {
  ParamPlacement placement;  // device and compute dtype (bf16 mixed precision on CUDA)
  bool reshard_after_forward = true;
  bool bf16_gemm_operands = false;     // emulate bf16 GEMMs in the linears FP8 does not convert
  bool async_tensor_parallel = false;  // parallelism.enable_async_tensor_parallel (tp > 1)
  CpRotateMethod cp_method = CpRotateMethod::Ring;  // how K/V move between cp ranks (cp > 1)
  fp8::Float8Options float8;
  bool float8_all_gather = false;  // FSDP gathers FP8 weights as e4m3 (tensorwise only)
  bool precompute_float8_scales = false;
  // Under pipeline parallelism: FSDP reduces each group per microbatch or once per step.
  PipelineGradientReduction pipeline_gradient_reduction = PipelineGradientReduction::Microbatch;
};

struct ParallelModel {
  std::shared_ptr<DataParallel> data_parallel;  // holds the parameters' storage
  fp8::Float8Conversion float8;                 // which linears run in FP8, and which not
  std::vector<std::string> tp_table;            // tp_overlap_table's lines (empty at tp 1)
  // What each step applied, one line each in order ("fp8: applied float8 to 28 linears"), for
  // the caller's log (this layer does not log).
  std::vector<std::string> steps;
  // What the tp and cp groups waited on their transfers (comm_waits.h): handed to whoever runs
  // the steps, which takes them after each one. Never null; idle at a degree of 1.
  std::shared_ptr<CommWaits> tp_waits = std::make_shared<CommWaits>();
  std::shared_ptr<CommWaits> cp_waits = std::make_shared<CommWaits>();
};

// The plan's entry for a linear, by the end of its name ("layers.3.attention.wo" is
// "attention.wo"; "output" only itself). Throws for a linear the plan does not name.
const TpPlanEntry& tp_plan_entry(std::string_view fqn);

// The start-up table of tensor parallelism: one line per linear of the plan (the layers'
// linears folded into one line each), its forward and backward pattern and whether its
// collectives overlap its GEMMs, then the tp collectives that are never overlapped and why.
std::vector<std::string> tp_overlap_table(const std::vector<model::Transformer*>& parts);

// Sets every parameter's slice as tensor parallelism at degree `tp` leaves rank `rank`'s:
// column-parallel weights by rows, row-parallel ones by columns, adapters after their base
// weight, the embedding by vocab rows. apply_tensor_parallel and the memory plan both call it.
void slice_for_tensor_parallel(model::Transformer& model, int64_t rank, int64_t tp);

// Throws InputError naming `tp_key` (the caller's name for the tp degree) and the model dim that
// does not divide.
void check_tensor_parallel_fit(const model::ModelArgs& args, int64_t tp, const std::string& tp_key);

ParallelModel parallelize(model::Transformer& model, const DeviceMesh& mesh,
                          const ParallelizeOptions& options);
// The parts of the model this rank holds (its pipeline stages' parts), each parallelized as
// above, with one DataParallel over all of them: the parts share its hooks, and the optimizer
// steps all their parameters.
ParallelModel parallelize(const std::vector<model::Transformer*>& parts, const DeviceMesh& mesh,
                          const ParallelizeOptions& options);

}  // namespace titan::parallel
