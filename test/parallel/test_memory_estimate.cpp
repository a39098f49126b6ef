// parallel/'s part of a rank's memory estimate (parallel/memory_estimate.h): the parameters,
// gradients and AdamW state it predicts are what a model and its optimizer allocate, each shard
// is its share, FSDP's gathered blocks follow fsdp.h's prefetch depth, and tensor parallelism
// adds its gathered linear input. No MPI: the e2e runs print what FSDP measured.
#include <doctest/doctest.h>

#include <cmath>

#include "core/memory_estimate.h"
#include "model/optim/adamw_optimizer.h"
#include "model/transformer.h"
#include "parallel/fsdp.h"
#include "parallel/memory_estimate.h"

using namespace titan;
using namespace titan::parallel;

namespace {

ParallelDims dims(int64_t dp_shard, int64_t tp) {
  return ParallelDims::resolve(1, dp_shard, tp, dp_shard * tp);
}

}  // namespace

TEST_SUITE("fast") {
  TEST_CASE(
      "memory estimate: one rank's parameters and gradients and AdamW state are what they allocate") {
    const model::ModelArgs args = model::model_flavor("debugmodel");
    model::Transformer model(args, DType::F32);
    model.allocate();
    model::AdamW optimizer(model.parameters(), model::AdamWConfig{});
    double param_bytes = 0, grad_bytes = 0;
    for (model::Parameter* p : model.parameters()) {
      param_bytes += static_cast<double>(p->value.nbytes());
      grad_bytes += static_cast<double>(p->grad.nbytes());
    }
    const MemoryEstimate m = estimate_parameter_memory(args, dims(1, 1), DType::F32);
    CHECK(m[MemoryCategory::Parameters] == param_bytes);
    CHECK(m[MemoryCategory::Gradients] == grad_bytes);
    CHECK(m[MemoryCategory::OptimizerState] == static_cast<double>(optimizer.state_bytes()));
    CHECK(m[MemoryCategory::GatheredParameters] == 0);  // nothing to gather without FSDP
    CHECK(m.total() == param_bytes + grad_bytes + static_cast<double>(optimizer.state_bytes()));
  }

  TEST_CASE("memory estimate: shards and the bf16 working copy and FSDP's gathered blocks") {
    const model::ModelArgs args = model::model_flavor("debugmodel");
    const double params = static_cast<double>(model::count_parameters(args));
    const MemoryEstimate fsdp = estimate_parameter_memory(args, dims(2, 2), DType::BF16);
    CHECK(fsdp[MemoryCategory::Gradients] == params * 4 / 4);
    // Under FSDP the bf16 copy is what the gather makes, not a persistent one.
    CHECK(fsdp[MemoryCategory::Parameters] == params * 4 / 4);
    const MemoryEstimate replicated = estimate_parameter_memory(args, dims(1, 2), DType::BF16);
    CHECK(replicated[MemoryCategory::Parameters] == params * (4 + 2) / 2);
    // The block that runs and those prefetched after it: one block's tp slice, bf16 values and
    // f32 gradients each.
    const double block = (params - 2.0 * 2048 * 256) / (6 * 2);
    CHECK(fsdp[MemoryCategory::GatheredParameters] ==
          doctest::Approx((1 + kFsdpPrefetchGroups) * block * (2 + 4)));
    // 2 ranks of FSDP on the CPU, debug model: titan_train measured "at most 13.01 MiB of
    // gathered parameters, their gradients and collective buffers at once".
    const MemoryEstimate cpu_fsdp = estimate_parameter_memory(args, dims(2, 1), DType::F32);
    CHECK(std::abs(cpu_fsdp[MemoryCategory::GatheredParameters] / (1024.0 * 1024.0) - 13.01) <
          0.01);
  }

  TEST_CASE("memory estimate: tensor parallelism adds one gathered linear input") {
    const model::ModelArgs args = model::model_flavor("debugmodel");
    CHECK(estimate_tensor_parallel_memory(args, dims(1, 1), 1024, DType::F32).total() == 0);
    const MemoryEstimate tp = estimate_tensor_parallel_memory(args, dims(1, 2), 1024, DType::BF16);
    CHECK(tp[MemoryCategory::Activations] == 1024.0 * 256 * 2);  // [B·S, D] in bf16
    CHECK(tp.total() == tp[MemoryCategory::Activations]);
  }
}
