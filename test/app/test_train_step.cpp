// The step of titan_train (app/train_step.h) in one process, against the same arithmetic
// written out by hand: one step's loss, and the weights after it, equal a plain forward,
// backward, global gradient norm, clip and AdamW step of an identical model on the same tokens
// (with gradient accumulation over two micro-batches); a step whose loss is made NaN is skipped
// with the weights untouched until the skip budget is spent; and the head-tail split of a
// window of tokens keeps each target beside its input.
#include <doctest/doctest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "app/config.h"
#include "app/layer_options.h"
#include "app/train_step.h"
#include "data/loader.h"
#include "data/token_source.h"
#include "model/optim/grad_clip.h"
#include "parallel/grad_norm.h"
#include "parallel/mpi_runtime.h"
#include "parallel/parallelize.h"
#include "support/small_model.h"

namespace titan::app {
namespace {

// Tokens 0..n-1 modulo the vocabulary, in memory.
class CountingSource final : public data::TokenSource {
 public:
  CountingSource(int64_t n, int64_t vocab) : n_(n), vocab_(vocab) {}
  int64_t size() const override { return n_; }
  void read(int64_t start, int64_t count, int32_t* dst) const override {
    for (int64_t i = 0; i < count; ++i) dst[i] = static_cast<int32_t>((start + i) * 7 % vocab_);
  }
  int64_t vocab_bound() const override { return vocab_; }
  std::string describe() const override { return "counting tokens"; }

 private:
  int64_t n_, vocab_;
};

const parallel::MpiRuntime& mpi() {
  static int argc = 0;
  static char** argv = nullptr;
  static parallel::MpiRuntime runtime(&argc, &argv);
  return runtime;
}

JobConfig small_job() {
  JobConfig c;
  c.training.seq_len = 16;
  c.training.local_batch_size = 2;
  c.training.global_batch_size = 4;  // two micro-batches of 2 on one rank
  c.training.steps = 4;
  c.training.max_norm = 0.5;  // small enough that the clip scales the gradients
  c.optimizer.lr = 1e-2;
  c.lr_scheduler.warmup_steps = 1;
  return c;
}

// One model on a one-rank mesh, with its optimizer: what the trainer's set-up builds.
struct Built {
  std::unique_ptr<model::Transformer> model;
  parallel::ParallelModel parallel;
  std::unique_ptr<model::AdamW> optimizer;
  std::unique_ptr<model::LrScheduler> scheduler;
  std::unique_ptr<data::DataLoader> loader;

  Built(const JobConfig& c, const parallel::DeviceMesh& mesh) {
    model = std::make_unique<model::Transformer>(testing::small_model_args(), DType::F32);
    parallel = parallel::parallelize(*model, mesh, parallelize_options(c, Device::cpu()));
    parallel.data_parallel->init_weights(static_cast<uint64_t>(c.training.seed));
    optimizer =
        std::make_unique<model::AdamW>(parallel.data_parallel->optimizer_params(), adamw_config(c));
    scheduler = std::make_unique<model::LrScheduler>(lr_scheduler(c));
    loader = std::make_unique<data::DataLoader>(std::make_shared<CountingSource>(4096, 258),
                                                c.training.seq_len, 1);
  }
  StepParts parts(const parallel::DeviceMesh& mesh) {
    StepParts p;
    p.parts = {model.get()};
    p.data_parallel = parallel.data_parallel.get();
    p.optimizer = optimizer.get();
    p.scheduler = scheduler.get();
    p.loader = loader.get();
    p.mesh = &mesh;
    p.tp_waits = parallel.tp_waits;
    p.cp_waits = parallel.cp_waits;
    return p;
  }
};

StepShape shape_of(const JobConfig& c) {
  StepShape s;
  s.local_batch = c.training.local_batch_size;
  s.seq_len = c.training.seq_len;
  s.global_batch = c.training.global_batch_size;
  s.accumulation = 2;
  return s;
}

double max_difference(const Built& a, const Built& b) {
  const std::vector<model::Parameter*> pa = a.parallel.data_parallel->optimizer_params();
  const std::vector<model::Parameter*> pb = b.parallel.data_parallel->optimizer_params();
  REQUIRE(pa.size() == pb.size());
  double most = 0;
  for (size_t i = 0; i < pa.size(); ++i) {
    const float* x = pa[i]->value.data<float>();
    const float* y = pb[i]->value.data<float>();
    for (int64_t k = 0; k < pa[i]->value.numel(); ++k) {
      most = std::max(most, static_cast<double>(std::fabs(x[k] - y[k])));
    }
  }
  return most;
}

TEST_SUITE("fast") {
  TEST_CASE(
      "train step: one step equals forward and backward then norm and clip and AdamW by hand") {
    const JobConfig c = small_job();
    const parallel::DeviceMesh mesh =
        parallel::DeviceMesh::root(parallel::ParallelDims::resolve(1, 1, 1, 1), mpi().world_rank());
    Built stepped(c, mesh), by_hand(c, mesh);
    REQUIRE(max_difference(stepped, by_hand) == 0.0);

    TrainStep step(c, stepped.parts(mesh), shape_of(c));
    const StepResult result = step.run(1);

    // By hand: the same two micro-batches, each token's loss over the global batch's tokens.
    const double tokens = static_cast<double>(c.training.global_batch_size * c.training.seq_len);
    by_hand.parallel.data_parallel->zero_grad();
    double loss_sum = 0;
    for (int micro = 0; micro < 2; ++micro) {
      auto [inputs, targets, doc_start] = local_tokens(
          by_hand.loader->next_batch(c.training.local_batch_size), c.training.seq_len, 1, 0);
      loss_sum += by_hand.model->forward(inputs, targets, 1.0 / tokens);
      by_hand.model->backward();
    }
    by_hand.parallel.data_parallel->finish_gradients();
    std::vector<model::Parameter*> params = by_hand.parallel.data_parallel->optimizer_params();
    const double norm = parallel::global_grad_norm(params, mesh);
    model::clip_grads_to_norm(params, norm, c.training.max_norm);
    by_hand.optimizer->step(by_hand.scheduler->lr(0));

    CHECK(result.applied);
    CHECK(result.loss == doctest::Approx(loss_sum / tokens).epsilon(1e-12));
    CHECK(result.grad_norm == doctest::Approx(norm).epsilon(1e-12));
    CHECK(norm > c.training.max_norm);  // the clip did something
    CHECK(max_difference(stepped, by_hand) == 0.0);
    // The step moved the weights: the comparison above is not of two untouched models.
    Built untouched(c, mesh);
    CHECK(max_difference(stepped, untouched) > 0.0);
    // A one-rank mesh waits on nothing.
    const StepWaits waits = step.take_waits();
    CHECK(waits.tp_seconds == 0.0);
    CHECK(waits.cp_seconds == 0.0);
  }

  TEST_CASE(
      "train step: a NaN loss skips the step with the weights untouched until the budget is "
      "spent") {
    JobConfig c = small_job();
    c.training.skip_nonfinite_steps = 1;
    const parallel::DeviceMesh mesh =
        parallel::DeviceMesh::root(parallel::ParallelDims::resolve(1, 1, 1, 1), mpi().world_rank());
    Built stepped(c, mesh), untouched(c, mesh);
    StepShape shape = shape_of(c);
    shape.faults = {{-1, 1, FaultKind::NanLoss}, {-1, 2, FaultKind::NanLoss}};
    TrainStep step(c, stepped.parts(mesh), shape);
    const StepResult skipped = step.run(1);
    CHECK_FALSE(skipped.applied);
    CHECK(std::isnan(skipped.loss));
    CHECK(std::isnan(skipped.grad_norm));  // not computed for a non-finite loss
    CHECK(step.skipped_steps() == 1);
    CHECK(max_difference(stepped, untouched) == 0.0);
    CHECK_THROWS_WITH_AS(step.run(2),
                         doctest::Contains("step 2: loss is nan; training diverged after 1 "
                                           "skipped step (training.skip_nonfinite_steps 1)"),
                         TrainingDiverged);
  }

  TEST_CASE("train step: the cp split keeps each target beside its input") {
    // One window [1, 9] of tokens 0..8: inputs 0..7, targets 1..8; cp 2 rank 1 holds chunks 1
    // and 2 of four chunks of 2: positions 2, 3 and 4, 5.
    std::vector<int32_t> window(9);
    for (int32_t i = 0; i < 9; ++i) window[static_cast<size_t>(i)] = i;
    const Tensor t = Tensor::from_vector<int32_t>(window, {1, 9});
    auto [inputs, targets, doc_start] = local_tokens(t, 8, 2, 1);
    REQUIRE(inputs.numel() == 4);
    const std::vector<int32_t> in(inputs.data<int32_t>(), inputs.data<int32_t>() + 4);
    const std::vector<int32_t> out(targets.data<int32_t>(), targets.data<int32_t>() + 4);
    CHECK(in == std::vector<int32_t>{2, 3, 4, 5});
    CHECK(out == std::vector<int32_t>{3, 4, 5, 6});
    auto [whole, next, no_documents] = local_tokens(t, 8, 1, 0);
    CHECK(whole.numel() == 8);
    CHECK(next.data<int32_t>()[7] == 8);
  }

  TEST_CASE("train step: with no skips allowed the first non-finite norm says what to change") {
    const JobConfig c = small_job();
    NonfiniteSteps steps(c, 0);
    CHECK_THROWS_WITH_AS(steps.skip(7, 2.5, std::nan("")),
                         doctest::Contains("step 7: gradient norm is nan; training diverged; to "
                                           "skip such steps instead, set "
                                           "training.skip_nonfinite_steps"),
                         TrainingDiverged);
  }
}

}  // namespace
}  // namespace titan::app
