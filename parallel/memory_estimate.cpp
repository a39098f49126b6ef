#include "parallel/memory_estimate.h"

#include <algorithm>

#include "core/check.h"
#include "model/optim/muon_optimizer.h"
#include "model/transformer.h"
#include "parallel/fsdp_memory.h"
#include "parallel/owned_rows.h"
#include "parallel/parallelize.h"
#include "parallel/tensor_parallel_memory.h"

namespace titan::parallel {

namespace {

using Bytes = MemoryTimeline::Bytes;

using replay::d;

using replay::kMasterBytes;

}  // namespace

ParallelLayout parallel_layout(const model::ModelArgs& args, const ParallelMemoryOptions& options) {
  const int64_t tp = options.dims.tp;
  // The caller checked tp under its user's name for it (parallelism.tp); this is the mesh's.
  check_tensor_parallel_fit(args, tp, "the mesh's tp degree");
  // A declared model has no storage: this is the model parallelize() would shard, rank 0's
  // slices standing for every rank's (they split evenly).
  model::Transformer model(args, DType::F32);
  ParallelLayout layout;
  if (tp > 1) slice_for_tensor_parallel(model, 0, tp);
  fp8::Float8Options float8 = options.float8;
  float8.weight_cache = nullptr;
  layout.float8 = fp8::convert_to_float8(model, float8, nullptr);
  const bool coded_gather =
      options.float8.enabled && options.float8_all_gather && options.shard_degree() > 1;
  for (model::Linear* linear : model.linears()) {
    const Shape local = linear->weight().local_shape();
    LinearLayout l;
    l.column = tp_plan_entry(linear->fqn()).style == TpStyle::ColumnParallel;
    l.weight = {local[0], local[1]};
    l.float8 = std::find(layout.float8.converted.begin(), layout.float8.converted.end(),
                         linear->fqn()) != layout.float8.converted.end();
    layout.linears[linear->fqn()] = l;
  }
  for (const model::ParamGroup& group : model.param_groups()) {
    if (!options.group_ids.empty() && std::find(options.group_ids.begin(), options.group_ids.end(),
                                                group.id) == options.group_ids.end()) {
      continue;
    }
    ParamGroupLayout g;
    g.name = group.name;
    g.id = group.id;
    g.read_by_head = group.read_by_head;
    for (const model::Parameter* p : group.params) {
      const Shape local = p->local_shape();
      ParamLayout pl;
      pl.name = p->name;
      pl.rows = local[0];
      pl.cols = local.ndim() == 2 ? local[1] : 1;
      pl.trained = p->trained();
      pl.coded = coded_gather &&
                 std::find(layout.float8.weights.begin(), layout.float8.weights.end(), p) !=
                     layout.float8.weights.end();
      g.params.push_back(pl);
    }
    layout.groups.push_back(std::move(g));
  }
  return layout;
}

ParallelModelMemory::ParallelModelMemory(const model::ModelArgs& args,
                                         const ParallelMemoryOptions& options,
                                         MemoryTimeline& timeline)
    : layout_(parallel_layout(args, options)), options_(options) {
  MemoryTimeline& t = timeline;
  const bool fsdp = options.shard_degree() > 1;
  const double compute = static_cast<double>(dtype_size(options.compute_dtype));
  // The parameters and gradients (FSDP's shards, or the whole tp slices with their working copy
  // in the compute dtype), then the optimizer's state of what it steps.
  std::vector<std::pair<double, int>> stepped;  // elements, and how many states each keeps
  for (const ParamGroupLayout& g : layout_.groups) {
    for (const ParamLayout& p : g.params) {
      const int64_t rows = fsdp ? fsdp_shard_rows(p.rows, options.shard_degree()) : p.rows;
      const double n = d(rows) * d(p.cols);
      state_.push_back(t.hold(MemoryCategory::Parameters, n * kMasterBytes));
      if (p.trained) state_.push_back(t.hold(MemoryCategory::Gradients, n * kMasterBytes));
      if (!fsdp && options.compute_dtype != DType::F32) {
        state_.push_back(t.hold(MemoryCategory::Parameters, n * compute));
      }
      if (p.trained) {
        stepped.emplace_back(n, options.muon && model::is_muon_matrix(p.name) ? 1 : 2);
      }
    }
  }
  const double moment = static_cast<double>(model::moment_bytes(options.optimizer_state_dtype));
  for (const auto& [n, states] : stepped) {
    for (int k = 0; k < states; ++k) {
      state_.push_back(t.hold(MemoryCategory::OptimizerState, n * moment));
    }
  }
  if (fsdp) fsdp_ = FsdpMemory::make(layout_, options);
  local_ = std::make_unique<model::LocalLinearMemory>();
  if (options.dims.tp > 1) {
    column_ = tensor_parallel_linear_memory(true, options.dims.tp, options.async_tensor_parallel,
                                            options.cuda);
    row_ = tensor_parallel_linear_memory(false, options.dims.tp, options.async_tensor_parallel,
                                         options.cuda);
  }
  high_precision_ = std::make_unique<model::HighPrecisionGemmsMemory>(options.bf16_gemm_operands);
  if (options.float8.enabled) {
    fp8::Float8MemoryOptions f;
    f.recipe = options.float8.recipe;
    f.tp_amax = options.dims.tp > 1;
    f.activation_amax = options.dims.cp > 1;
    f.gathered_weights = options.float8_all_gather && fsdp;
    f.cuda = options.cuda;
    float8_ = std::make_unique<fp8::Float8GemmsMemory>(f);
  }
}

ParallelModelMemory::~ParallelModelMemory() = default;

model::ParamHooksMemory& ParallelModelMemory::hooks() {
  if (fsdp_) return *fsdp_;
  return replicated_;
}

model::LinearSeamsFor ParallelModelMemory::linears() {
  return [this](const std::string& fqn) {
    const auto it = layout_.linears.find(fqn);
    TT_CHECK(it != layout_.linears.end(), "memory estimate: no linear '", fqn, "'");
    model::LinearSeams seams;
    seams.weight = it->second.weight;
    seams.style = options_.dims.tp == 1 ? local_.get()
                  : it->second.column   ? static_cast<model::LinearMemory*>(column_.get())
                                        : static_cast<model::LinearMemory*>(row_.get());
    seams.gemms = it->second.float8 ? float8_.get() : high_precision_.get();
    return seams;
  };
}

void ParallelModelMemory::zero_grad(MemoryTimeline&) {
  if (fsdp_) fsdp_->zero_grad();
}

void ParallelModelMemory::finish_gradients(MemoryTimeline& t) {
  // FSDP's waits (and, under pp, its one reduce-scatter per group), then (HSDP, DDP,
  // tp-replicated gradients) all-reduces in place: on the CPU in f32 and on CUDA through NCCL,
  // neither of which stages a copy.
  if (fsdp_) fsdp_->finish_gradients(t);
}

void ParallelModelMemory::on_weights_updated(MemoryTimeline& t) {
  if (fsdp_) fsdp_->on_weights_updated(t);
}

}  // namespace titan::parallel
