// The checks of a training config (app/trainer_checks.h) called on configs directly, with no
// job: each refusal names its key, the value seen and the fix; each resolution gives the batch
// and the pipeline titan_train then runs.
#include <doctest/doctest.h>

#include <string>

#include "app/config.h"
#include "app/model_args.h"
#include "app/trainer_checks.h"
#include "core/check.h"
#include "data/byte_tokenizer.h"

namespace titan::app {
namespace {

parallel::ParallelDims dims_of(int64_t dp_shard, int64_t tp) {
  return parallel::ParallelDims::resolve(1, dp_shard, tp, dp_shard * tp);
}

TEST_SUITE("fast") {
  TEST_CASE("trainer checks: the batch resolves and a global batch that does not split refuses") {
    JobConfig c;
    c.training.local_batch_size = 4;
    c.training.global_batch_size = 32;
    const BatchPlan batch = resolve_batch(c, dims_of(2, 1));
    CHECK(batch.global_batch == 32);
    CHECK(batch.accumulation == 4);  // 32 / (4 × dp 2)
    CHECK(batch.validation_local_batch == 4);
    CHECK(batch.validation_seq_len == c.training.seq_len);
    c.training.global_batch_size = -1;
    CHECK(resolve_batch(c, dims_of(2, 1)).accumulation == 1);
    c.training.global_batch_size = 12;
    CHECK_THROWS_WITH_AS(resolve_batch(c, dims_of(2, 1)),
                         "training.global_batch_size: 12 is not a multiple of local_batch_size 4 "
                         "× dp 2 = 8; use a multiple of 8 (or -1 for no gradient accumulation)",
                         InputError);
  }

  TEST_CASE("trainer checks: the model must split over tp and the batch fit 64 bits") {
    JobConfig c;
    const model::ModelArgs args = model_args(c);  // the debug model: 16 heads
    check_model_fits_mesh(c, args, dims_of(1, 2));
    CHECK_THROWS_WITH_AS(check_model_fits_mesh(c, args, dims_of(1, 3)),
                         doctest::Contains("parallelism.tp: 3 does not divide the model's n_heads"),
                         InputError);
    c.training.local_batch_size = int64_t{1} << 40;
    c.training.seq_len = int64_t{1} << 30;
    CHECK_THROWS_WITH_AS(check_model_fits_mesh(c, args, dims_of(1, 1)),
                         doctest::Contains("overflow 64 bits"), InputError);
  }

  TEST_CASE("trainer checks: no pipeline at pp 1 and at pp 2 its microbatch must split over tp") {
    JobConfig c;
    const model::ModelArgs args = model_args(c);
    CHECK_FALSE(check_pipeline(c, args).has_value());
    c.parallelism.pipeline_parallel_degree = 2;
    c.training.local_batch_size = 4;
    c.training.seq_len = 6;
    const std::optional<PipelinePlan> plan = check_pipeline(c, args);
    REQUIRE(plan.has_value());
    CHECK(plan->stages.size() == 2);
    CHECK(plan->microbatches() == 4);
    c.parallelism.tp = 4;  // 1 × 6 tokens do not split into 4 sequence shards
    CHECK_THROWS_WITH_AS(check_pipeline(c, args),
                         doctest::Contains("parallelism.pipeline_parallel_microbatch_size: 1 × "
                                           "training.seq_len 6 = 6 tokens per microbatch do not "
                                           "split into tp 4"),
                         InputError);
  }

  TEST_CASE("trainer checks: a step that does not fit the device names its largest part") {
    JobConfig c;
    c.training.local_batch_size = 1;
    c.training.seq_len = 16;  // the parameters and AdamW's state outweigh these activations
    const model::ModelArgs args = model_args(c);
    DeviceCapacity roomy{64.0 * (1 << 30), 1, false, "a roomy node"};
    check_memory(c, args, dims_of(1, 1), roomy);
    DeviceCapacity tiny{1 << 20, 1, false, "a tiny node"};
    CHECK_THROWS_WITH_AS(check_memory(c, args, dims_of(1, 1), tiny),
                         doctest::Contains("model.flavor: debugmodel needs"), InputError);
    CHECK_THROWS_WITH_AS(check_memory(c, args, dims_of(1, 1), tiny),
                         doctest::Contains("GiB by the plan of its step on a tiny node"),
                         InputError);
    // Activations dominate a long enough batch: the refusal names the batch, not the model.
    c.training.local_batch_size = 64;
    c.training.seq_len = 8192;
    CHECK_THROWS_WITH_AS(check_memory(c, args, dims_of(1, 1), tiny),
                         doctest::Contains("training.local_batch_size: 64 sequences × seq_len "
                                           "8192 need about"),
                         InputError);
    // A model far deeper than any published is refused before its plan describes each layer.
    model::ModelArgs deep = args;
    deep.n_layers = 100'000'000;
    CHECK_THROWS_WITH_AS(check_memory(c, deep, dims_of(1, 1), roomy),
                         doctest::Contains("model.n_layers: 100000000 layers of"), InputError);
    // On the CPU the device is this node's memory, shared by its ranks.
    const DeviceCapacity node = capacity_of(RankDevice{}, 3);
    CHECK(node.sharers == 3);
    CHECK(node.bytes > 0);
    CHECK(node.where.find("this node's 3 rank(s)") == 0);
  }

  TEST_CASE("trainer checks: block_causal takes the tokenizer's EOS and causal none") {
    JobConfig c;
    const data::ByteTokenizer bytes;
    CHECK_FALSE(check_document_eos(c, bytes, "data.tokenizer_path").has_value());
    c.model.attention_mask = model::AttentionMaskKind::BlockCausal;
    CHECK(check_document_eos(c, bytes, "data.tokenizer_path") == data::ByteTokenizer::kEos);
  }
}

}  // namespace
}  // namespace titan::app
