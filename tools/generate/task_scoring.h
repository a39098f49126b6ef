// titan_generate --tasks: multiple-choice tasks (data/eval_tasks.h) scored as lm-evaluation-
// harness scores them, with the forward --eval runs (model::Transformer::evaluate_tokens, the
// validation pass of titan_train).
//
// Every choice is one request: the context's ids and the continuation's (data::encode_choice),
// joined and cut from the left to the sequence limit + 1 as the harness does; the model reads
// all but the last id, and the choice's log-likelihood is minus the sum of the token losses at
// the continuation's positions. Requests run longest first in batches of --eval-batch-size rows,
// each batch padded on the right to its longest: under causal attention a row's real positions
// never see its padding nor another row, so a request's sum does not depend on the batch it ran
// in (test_generate checks batch sizes 1 and 5 give the same sums).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "data/eval_tasks.h"
#include "data/tokenizer.h"
#include "model/transformer.h"

namespace titan::generate {

struct TaskResult {
  const data::Task* task = nullptr;
  std::vector<std::vector<double>> logliks;  // [item][choice], summed log-probabilities
  std::vector<std::vector<int64_t>> continuation_tokens;  // [item][choice]
  data::TaskMetrics metrics;
  int64_t shots = 0;  // few-shot examples before each item
};

struct TaskScoringStats {
  int64_t requests = 0, batches = 0;
  int64_t tokens = 0;         // the positions the model read, padding left out
  int64_t padded_tokens = 0;  // B × S summed over the batches
  double seconds = 0;         // in the forward and the sums
};

class TaskScoring {
 public:
  // Encodes every choice of every task; InputError naming the task file and line for a choice
  // with no token of its own, or a continuation longer than `position_limit` (what
  // `limit_source` set) leaves room for. `prefix`: BOS before every context, or nullopt.
  // shots > 0: each context with that many solved examples (data::fewshot_context, `seed`);
  // InputError naming --num-fewshot for a task with too few items.
  TaskScoring(std::vector<data::Task> tasks, const data::Tokenizer& tokenizer,
              std::optional<int32_t> prefix, int64_t position_limit,
              const std::string& limit_source, int64_t shots = 0, uint64_t seed = 0);

  std::vector<TaskResult> run(model::Transformer& model, int64_t batch_size,
                              TaskScoringStats& stats) const;
  const std::vector<data::Task>& tasks() const { return tasks_; }
  int64_t requests() const { return static_cast<int64_t>(requests_.size()); }
  // The widest row, for the memory check.
  int64_t longest() const { return longest_; }

 private:
  struct Request {
    size_t task = 0, item = 0, choice = 0;
    std::vector<int32_t> ids;  // context + continuation, cut from the left
    int64_t continuation = 0;  // its last ids are the continuation's
  };
  std::vector<data::Task> tasks_;
  std::vector<Request> requests_;  // longest first
  int64_t shots_ = 0;
  int64_t longest_ = 0;
};

// The table titan_generate prints: task, n, acc, ±stderr, acc_norm, ±stderr.
std::string task_table(const std::vector<TaskResult>& results);

}  // namespace titan::generate
