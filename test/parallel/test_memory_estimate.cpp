// parallel/'s part of a rank's memory estimate (parallel/memory_estimate.h): the parameters,
// gradients and AdamW state it holds are what a model and its optimizer allocate, FSDP's shards
// are padded as fsdp.cpp pads them, its gathers follow fsdp.h's prefetch depth, and the layout
// follows tensor parallelism's plan. No MPI here: the end-to-end comparison of a whole step with
// memory snapshots of real runs, every mesh included, is test/app/test_plan.cpp.
#include <doctest/doctest.h>

#include "core/memory_timeline.h"
#include "model/optim/adamw_optimizer.h"
#include "model/transformer.h"
#include "parallel/fsdp.h"
#include "parallel/memory_estimate.h"

using namespace titan;
using namespace titan::parallel;

namespace {

ParallelMemoryOptions options(int64_t dp_shard, int64_t tp, DType compute = DType::F32) {
  ParallelMemoryOptions o;
  o.dims = ParallelDims::resolve(1, dp_shard, tp, dp_shard * tp);
  o.compute_dtype = compute;
  return o;
}

double d(int64_t v) { return static_cast<double>(v); }

}  // namespace

TEST_SUITE("fast") {
  TEST_CASE(
      "memory estimate: one rank's parameters and gradients and AdamW state are what they "
      "allocate") {
    const model::ModelArgs args = model::model_flavor("debugmodel");
    model::Transformer model(args, DType::F32);
    model.allocate();
    model::AdamW optimizer(model.parameters(), model::AdamWConfig{});
    double param_bytes = 0, grad_bytes = 0;
    for (model::Parameter* p : model.parameters()) {
      param_bytes += static_cast<double>(p->value.nbytes());
      grad_bytes += static_cast<double>(p->grad.nbytes());
    }
    MemoryTimeline t;
    const ParallelModelMemory held(args, options(1, 1), t);
    CHECK(t.live()[MemoryCategory::Parameters] == param_bytes);
    CHECK(t.live()[MemoryCategory::Gradients] == grad_bytes);
    CHECK(t.live()[MemoryCategory::OptimizerState] == static_cast<double>(optimizer.state_bytes()));
    CHECK(t.live().total() ==
          param_bytes + grad_bytes + static_cast<double>(optimizer.state_bytes()));
  }

  TEST_CASE("memory estimate: bf16 AdamW state is half the f32 state and what AdamW allocates") {
    const model::ModelArgs args = model::model_flavor("debugmodel");
    model::Transformer model(args, DType::F32);
    model.allocate();
    const model::AdamW optimizer(
        model.parameters(),
        model::AdamWConfig{0.9, 0.95, 1e-8, 0.1, model::OptimizerStateDtype::BFloat16});
    MemoryTimeline f32, bf16;
    ParallelMemoryOptions o = options(1, 1);
    const ParallelModelMemory held_f32(args, o, f32);
    o.optimizer_state_dtype = model::OptimizerStateDtype::BFloat16;
    const ParallelModelMemory held_bf16(args, o, bf16);
    CHECK(bf16.live()[MemoryCategory::OptimizerState] * 2 ==
          f32.live()[MemoryCategory::OptimizerState]);
    CHECK(bf16.live()[MemoryCategory::OptimizerState] ==
          static_cast<double>(optimizer.state_bytes()));
    CHECK(bf16.live()[MemoryCategory::Parameters] == f32.live()[MemoryCategory::Parameters]);
  }

  TEST_CASE("memory estimate: FSDP's padded shards and the replicated bf16 working copy") {
    const model::ModelArgs args = model::model_flavor("debugmodel");
    // dp_shard 3 does not divide 256-row weights: each shard holds ⌈rows / 3⌉ rows.
    MemoryTimeline fsdp;
    const ParallelModelMemory sharded(args, options(3, 1), fsdp);
    double shard = 0;
    for (const ParamGroupLayout& g : sharded.layout().groups) {
      for (const ParamLayout& p : g.params) shard += d((p.rows + 2) / 3) * d(p.cols);
    }
    const double params = static_cast<double>(model::count_parameters(args));
    CHECK(shard > params / 3);  // the padding
    CHECK(fsdp.live()[MemoryCategory::Parameters] == 4 * shard);
    CHECK(fsdp.live()[MemoryCategory::Gradients] == 4 * shard);
    CHECK(fsdp.live()[MemoryCategory::OptimizerState] == 8 * shard);
    // Replicated over tp 2 in bf16: each tp slice in fp32 and its bf16 copy (the norms whole).
    MemoryTimeline replicated;
    const ParallelModelMemory copy(args, options(1, 2, DType::BF16), replicated);
    double slice = 0;
    for (const ParamGroupLayout& g : copy.layout().groups) {
      for (const ParamLayout& p : g.params) slice += d(p.rows) * d(p.cols);
    }
    CHECK(slice == params / 2 + (2 * args.n_layers + 1) * args.dim / 2);
    CHECK(replicated.live()[MemoryCategory::Parameters] == (4 + 2) * slice);
  }

  TEST_CASE("memory estimate: the layout follows the tp plan and the FP8 filter") {
    const model::ModelArgs args = model::model_flavor("debugmodel");
    ParallelMemoryOptions o = options(1, 2);
    o.float8.enabled = true;
    const ParallelLayout layout = parallel_layout(args, o);
    // Column-parallel wqkv splits its output rows, row-parallel wo its input columns.
    CHECK(layout.linears.at("layers.0.attention.wqkv").weight.out == args.qkv_dim() / 2);
    CHECK(layout.linears.at("layers.0.attention.wo").weight.in == args.dim / 2);
    CHECK(layout.linears.at("output").weight.out == args.vocab_size / 2);
    CHECK(layout.linears.at("layers.5.feed_forward.w2").float8);
    CHECK_FALSE(layout.linears.at("output").float8);  // filter_fqns: ["output"]
    CHECK(layout.groups.size() == static_cast<size_t>(args.n_layers + 2));
  }

  TEST_CASE("memory estimate: FSDP gathers the block that runs and kFsdpPrefetchGroups ahead") {
    const model::ModelArgs args = model::model_flavor("debugmodel");
    MemoryTimeline t;
    ParallelModelMemory held(args, options(2, 1), t);
    // A group's gathered values in f32, all shards: what materialize() holds for it.
    double block = 0;
    for (const ParamLayout& p : held.layout().groups[1].params)
      block += 2 * d((p.rows + 1) / 2) * d(p.cols) * 4;
    model::ParamHooksMemory& hooks = held.hooks();
    hooks.before_forward(t, 0);
    hooks.after_forward(t, 0);
    hooks.before_forward(t, 1);  // block 0 runs; the gathers of the next groups are posted
    const double gathered = t.live()[MemoryCategory::GatheredParameters];
    // Block 0 as values, and the gather buffers of the kFsdpPrefetchGroups groups after it
    // (blocks, all the same size, for the debug model's 6 layers).
    CHECK(gathered == doctest::Approx((1 + kFsdpPrefetchGroups) * block));
    hooks.after_forward(t, 1);  // resharded
    CHECK(t.live()[MemoryCategory::GatheredParameters] ==
          doctest::Approx(kFsdpPrefetchGroups * block));
  }
}
