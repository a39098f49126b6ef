// data/task_scoring.h without a model: a made-up forward whose token loss depends only on the
// position and the target, so that every way of cutting the work — batch sizes, padding to a
// mesh's multiple, a row's columns split over cp ranks as parallel::cp_shard splits them —
// must give the same per-choice sums as one rank's batches of one.
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include "data/byte_tokenizer.h"
#include "data/task_scoring.h"
#include "parallel/context_parallel.h"
#include "support/process.h"

namespace titan::data {
namespace {

// Every fixture task (each format) read as titan_train reads eval.tasks.
std::vector<Task> fixture_tasks() {
  std::vector<Task> tasks;
  for (const char* f : {"hellaswag", "arc", "piqa", "mmlu", "plain"}) {
    tasks.push_back(read_task_spec(
        titan::testing::source_path(std::string("test/fixtures/tasks/") + f + ".jsonl"),
        "eval.tasks"));
  }
  return tasks;
}

// tokens, targets [B, S] -> losses [B, S] f32: a function of (position, target) alone.
Tensor made_up_losses(const Tensor& tokens, const Tensor& targets) {
  const int64_t B = tokens.size(0), S = tokens.size(1);
  Tensor losses = Tensor::zeros({B, S}, DType::F32);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t s = 0; s < S; ++s) {
      const int32_t t = targets.data<int32_t>()[b * S + s];
      losses.data<float>()[b * S + s] = 0.25f + 0.001f * static_cast<float>(t % 97) +
                                        0.0001f * static_cast<float>(s % 13);
    }
  }
  return losses;
}

}  // namespace

TEST_SUITE("fast") {
  TEST_CASE("task scoring: padding to a mesh's multiple and splitting a row over cp ranks leave every sum as one rank's") {
    const ByteTokenizer tokenizer;
    const TaskScoring scoring(fixture_tasks(), tokenizer, ByteTokenizer::kBos, 8192, "the limit",
                              0, 0, {"eval.tasks", "eval.num_fewshot", "eval.limit"});
    REQUIRE(scoring.requests() == 30);
    TaskScoringStats stats;
    const std::vector<TaskResult> one = scoring.run(made_up_losses, 1, stats);
    CHECK(stats.batches == 30);

    for (const int64_t cp : {1, 2, 4}) {
      CAPTURE(cp);
      const int64_t multiple = (cp > 1 ? 2 * cp : 1) * 2;  // tp 2
      std::vector<double> sums(static_cast<size_t>(scoring.requests()), 0.0);
      for (const TaskBatch& batch : scoring.batches(3, multiple)) {
        CHECK(batch.seq_len % multiple == 0);
        CHECK(batch.rows <= 3);
        const auto [tokens, targets] = scoring.batch_tokens(batch);
        const Tensor losses = made_up_losses(tokens, targets);
        for (int64_t rank = 0; rank < cp; ++rank) {
          // What cp rank `rank` holds of each row, and where its columns sit.
          const Tensor local = cp == 1 ? losses : parallel::cp_shard(losses, 1, cp, rank);
          scoring.add_losses(batch, local,
                             cp == 1 ? std::vector<int64_t>{}
                                     : parallel::cp_positions(batch.seq_len, cp, rank),
                             sums);
        }
      }
      const std::vector<TaskResult> split = scoring.results(sums);
      REQUIRE(split.size() == one.size());
      for (size_t t = 0; t < one.size(); ++t) {
        CAPTURE(one[t].task->name);
        CHECK(split[t].metrics.acc == one[t].metrics.acc);
        CHECK(split[t].metrics.acc_norm == one[t].metrics.acc_norm);
        for (size_t i = 0; i < one[t].logliks.size(); ++i) {
          for (size_t c = 0; c < one[t].logliks[i].size(); ++c) {
            CHECK(one[t].logliks[i][c] < 0);
            CHECK(split[t].logliks[i][c] == doctest::Approx(one[t].logliks[i][c]).epsilon(1e-12));
          }
        }
      }
    }
  }

  TEST_CASE("task scoring: an item record names its task and line and each choice's sum") {
    const ByteTokenizer tokenizer;
    std::vector<Task> tasks;
    tasks.push_back(read_task_spec(
        "plain:" + titan::testing::source_path("test/fixtures/tasks/plain.jsonl"), "eval.tasks"));
    const TaskScoring scoring(std::move(tasks), tokenizer, ByteTokenizer::kBos, 8192, "the limit");
    TaskScoringStats stats;
    const std::vector<TaskResult> results = scoring.run(made_up_losses, 4, stats);
    const std::string record = task_item_record(results.front(), 0);
    CHECK(record.starts_with("{\"task\": \"plain\", \"line\": 1, \"label\": "));
    CHECK(record.find("\"loglik\": [-") != std::string::npos);
  }
}

}  // namespace titan::data
