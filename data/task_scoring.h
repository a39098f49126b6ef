// Multiple-choice tasks (data/eval_tasks.h) scored as lm-evaluation-harness scores them, for
// titan_generate --tasks (one rank) and titan_train's eval.tasks (any mesh). The forward is the
// caller's: this file turns the tasks into padded batches of token ids, and a forward's token
// losses back into each choice's log-likelihood, so one rank and a mesh share every step of it
// but the model's.
//
// Every choice is one request: the context's ids and the continuation's (data::encode_choice),
// joined and cut from the left to the sequence limit + 1 as the harness does; the model reads
// all but the last id, and the choice's log-likelihood is minus the sum of the token losses at
// the continuation's positions. Requests run longest first in batches of a given number of rows,
// each batch padded on the right to its longest (rounded up to a multiple a mesh asks for: cp
// cuts S into 2·cp chunks, tp shards the B·S/cp rows): under causal attention a row's real
// positions never see its padding nor another row, so a request's sum does not depend on the
// batch it ran in (test_tasks checks batch sizes 1 and 5 give the same sums).
//
// On a mesh a rank may hold only some of a row's token losses (its cp chunks), or none (a
// pipeline stage without the head): add_losses() takes the global positions of the columns it
// holds, and the partial sums of every rank add up, over any split, to the request's sum.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "data/eval_tasks.h"
#include "data/tokenizer.h"

namespace titan::data {

struct TaskResult {
  const Task* task = nullptr;
  std::vector<std::vector<double>> logliks;  // [item][choice], summed log-probabilities
  std::vector<std::vector<int64_t>> continuation_tokens;  // [item][choice]
  TaskMetrics metrics;
  int64_t shots = 0;  // few-shot examples before each item
};

struct TaskScoringStats {
  int64_t requests = 0, batches = 0;
  int64_t tokens = 0;         // the positions the model read, padding left out
  int64_t padded_tokens = 0;  // B × S summed over the batches
  double seconds = 0;         // in the forward and the sums
};

// The names an executable's messages give its options.
struct TaskOptionNames {
  std::string tasks = "--tasks";
  std::string num_fewshot = "--num-fewshot";
  std::string limit = "--limit";
};

// Requests [begin, end) of the longest-first order, as tokens [rows, seq_len].
struct TaskBatch {
  size_t begin = 0, end = 0;
  int64_t rows = 0, seq_len = 0;
};

class TaskScoring {
 public:
  // Encodes every choice of every task; InputError naming the task file and line for a choice
  // with no token of its own, or a continuation longer than `position_limit` (what
  // `limit_source` set) leaves room for. `prefix`: BOS before every context, or nullopt.
  // shots > 0: each context with that many solved examples (data::fewshot_context, `seed`);
  // InputError naming names.num_fewshot for a task with too few items.
  TaskScoring(std::vector<Task> tasks, const Tokenizer& tokenizer, std::optional<int32_t> prefix,
              int64_t position_limit, const std::string& limit_source, int64_t shots = 0,
              uint64_t seed = 0, const TaskOptionNames& names = {});

  // The requests in batches of at most `batch_size` rows, each S its longest row rounded up to
  // a multiple of `seq_multiple`.
  std::vector<TaskBatch> batches(int64_t batch_size, int64_t seq_multiple = 1) const;
  // A batch's tokens and targets [B, S] i32. Padding reads token 0 and predicts token 0: columns
  // past a request's end are never summed.
  std::pair<Tensor, Tensor> batch_tokens(const TaskBatch& batch) const;
  // Adds to sums[request] the token losses of batch's continuations that `losses` [B, n] holds
  // (host, floating), column j being global position positions[j] (empty: j itself, n = S).
  void add_losses(const TaskBatch& batch, const Tensor& losses,
                  const std::vector<int64_t>& positions, std::vector<double>& sums) const;
  // Each task's log-likelihoods and metrics from every request's summed token losses.
  std::vector<TaskResult> results(const std::vector<double>& sums) const;

  // On one rank: every batch through `forward` (tokens, targets [B, S] -> token losses [B, S]
  // on the host), then results().
  using Forward = std::function<Tensor(const Tensor& tokens, const Tensor& targets)>;
  std::vector<TaskResult> run(const Forward& forward, int64_t batch_size,
                              TaskScoringStats& stats) const;

  const std::vector<Task>& tasks() const { return tasks_; }
  int64_t requests() const { return static_cast<int64_t>(requests_.size()); }
  // The widest row, for the memory check.
  int64_t longest() const { return longest_; }
  // The positions a batch's rows read, padding left out.
  int64_t real_tokens(const TaskBatch& batch) const;

 private:
  struct Request {
    size_t task = 0, item = 0, choice = 0;
    std::vector<int32_t> ids;  // context + continuation, cut from the left
    int64_t continuation = 0;  // its last ids are the continuation's
  };
  std::vector<Task> tasks_;
  std::vector<Request> requests_;  // longest first
  int64_t shots_ = 0;
  int64_t longest_ = 0;
};

// {"task", "line", "label", "loglik", "continuation_tokens", "choice_bytes"}: one item, each
// array one entry per choice (titan_generate --task-scores, titan_train eval.task_scores).
std::string task_item_record(const TaskResult& result, size_t item);

}  // namespace titan::data
