// parallel/'s part of a rank's memory estimate (core/memory_timeline.h): what parallelize()
// makes a rank hold, and what FSDP's hooks and tensor parallelism's linear styles allocate in a
// step, replayed on a MemoryTimeline in the order fsdp.cpp, replicated.cpp and
// tensor_parallel.cpp allocate and free it. This file is the layout and the composition; each
// replay sits beside the code it replays: fsdp_memory.h, tensor_parallel_memory.h,
// context_parallel_memory.h (docs/architecture.md#decision-19).
//
//   Parameters          FSDP: each parameter's fp32 shard, ⌈rows / dp_shard⌉ rows of its tp
//                       slice (padding included). Replicated: the fp32 tp slice, and its working
//                       copy in the compute dtype when that is not fp32 (bf16 on CUDA).
//   Gradients           fp32, shaped like the fp32 parameters
//   OptimizerState      AdamW's two moments of them, or Muon's one momentum for a block's
//                       matrices (fp32, or bf16: optimizer.state_dtype)
//   GatheredParameters  FSDP: a group's gather buffer, then its parameters in the compute dtype
//                       (all dp_shard shards, padding included) while it runs, their unsharded
//                       fp32 gradients in backward and the packed reduce-scatter input; the group
//                       that runs and the kFsdpPrefetchGroups (fsdp.h) posted ahead of it, and
//                       every group at once without reshard_after_forward. Under pipeline
//                       parallelism (pp > 1) with the step gradient reduction the unsharded
//                       gradients stay from a group's first backward to finish_gradients,
//                       which reduce-scatters each group once
//   CommBuffers         the packed send buffer of each posted gather (held by the collective
//                       until it completes) and the reduce-scatter's output
//   Fp8Cache            the float8 all-gather's gathered codes (fp8/float8_memory.h)
//   Activations         tensor parallelism's gathered inputs, their send copies and the
//                       reduce-scatter's chunks, counted in the block that runs the linear
//
// The layout — each parameter's tp slice, which linears are FP8 — is decided by the code
// parallelize() runs (kLlamaTpPlan, fp8::convert_to_float8) on a declared model with no
// storage, so an estimate never disagrees with the model about what exists.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/memory_timeline.h"
#include "fp8/float8_linear.h"
#include "fp8/float8_memory.h"
#include "model/activation_memory.h"
#include "model/config.h"
#include "model/optim/optimizer_state_dtype.h"
#include "parallel/parallel_dims.h"
#include "parallel/pipeline_gradient_reduction.h"

namespace titan::parallel {

// The arithmetic every replay of parallel/ shares (memory_estimate.cpp, fsdp_memory.cpp,
// tensor_parallel_memory.cpp, context_parallel_memory.cpp).
namespace replay {
// An element count, for the replays' byte counts in double.
inline double d(int64_t count) { return static_cast<double>(count); }
// fp32: master parameters, gradients, AdamW moments, FSDP's reduce-scatters.
inline constexpr double kMasterBytes = 4;
}  // namespace replay

// What parallelize() is given, as the memory estimate needs it.
struct ParallelMemoryOptions {
  ParallelDims dims;
  // The degree FSDP shards over: dp_shard × cp (torchtitan's dp_shard_cp: context-parallel
  // ranks hold no extra replicas).
  int64_t shard_degree() const { return dims.fsdp_shards(); }
  DType compute_dtype = DType::F32;
  bool cuda = false;
  bool reshard_after_forward = true;
  bool async_tensor_parallel = false;
  bool bf16_gemm_operands = false;  // the CPU's bf16 emulation of the high-precision GEMMs
  fp8::Float8Options float8;
  bool float8_all_gather = false;
  bool precompute_float8_scales = false;
  PipelineGradientReduction pipeline_gradient_reduction = PipelineGradientReduction::Microbatch;
  model::OptimizerStateDtype optimizer_state_dtype = model::OptimizerStateDtype::Float32;
  // optimizer.name Muon: one momentum buffer for each block matrix, AdamW's two moments for
  // the rest.
  bool muon = false;
  // The parameter groups this rank holds, by id (0 the embedding, 1..L the blocks, L+1 the
  // head): a pipeline rank's stages'. Empty: every group.
  std::vector<int> group_ids;
};

// One parameter as this rank's mesh lays it out.
struct ParamLayout {
  std::string name;
  int64_t rows = 0, cols = 1;  // the tp slice, [rows, cols] (cols 1 for a vector)
  bool coded = false;          // gathered as FP8 codes (the float8 all-gather)
  bool trained = true;         // false: frozen (LoRA's base weights), no gradient or state
};
struct ParamGroupLayout {
  std::string name;  // "tok_embeddings", "layers.3", "head"
  int id = 0;        // the hooks' group id
  std::vector<ParamLayout> params;
  bool read_by_head = false;  // model::ParamGroup
};
struct LinearLayout {
  bool column = true;  // column-parallel (else row-parallel); local at tp 1
  model::LinearShape weight;
  bool float8 = false;
};
struct ParallelLayout {
  std::vector<ParamGroupLayout> groups;
  std::map<std::string, LinearLayout> linears;  // by fqn
  fp8::Float8Conversion float8;                 // converted names, auto-filter warnings
};

// The layout of `args` on `options`' mesh, sliced by the tp plan's own function. InputError
// (naming the mesh's tp degree or the FP8 layer) for what parallelize() would refuse.
ParallelLayout parallel_layout(const model::ModelArgs& args, const ParallelMemoryOptions& options);

class FsdpMemory;  // fsdp_memory.h

// A rank's model on a timeline, as parallelize() and the AdamW constructor leave it: the
// constructor holds the parameters, gradients and optimizer state; hooks() and linears() are the
// seams model::TransformerMemory replays a step through; the rest mirror DataParallel's calls
// in the step (app/train_step.h).
class ParallelModelMemory {
 public:
  ParallelModelMemory(const model::ModelArgs& args, const ParallelMemoryOptions& options,
                      MemoryTimeline& timeline);
  ~ParallelModelMemory();

  model::ParamHooksMemory& hooks();
  model::LinearSeamsFor linears();
  void zero_grad(MemoryTimeline& t);
  void finish_gradients(MemoryTimeline& t);
  void on_weights_updated(MemoryTimeline& t);
  const ParallelLayout& layout() const { return layout_; }

 private:
  ParallelLayout layout_;
  ParallelMemoryOptions options_;
  std::vector<MemoryTimeline::Bytes> state_;  // parameters, gradients, AdamW moments
  std::unique_ptr<FsdpMemory> fsdp_;
  model::ParamHooksMemory replicated_;  // replicated parameters: the hooks allocate nothing
  std::unique_ptr<model::LinearMemory> local_, column_, row_;
  std::unique_ptr<model::GemmsMemory> high_precision_, float8_;
};

}  // namespace titan::parallel
