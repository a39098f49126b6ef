#include "data/task_scoring.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "core/check.h"
#include "core/dispatch.h"
#include "core/json_text.h"

namespace titan::data {

TaskScoring::TaskScoring(std::vector<Task> tasks, const Tokenizer& tokenizer,
                         std::optional<int32_t> prefix, int64_t position_limit,
                         const std::string& limit_source, int64_t shots, uint64_t seed,
                         const TaskOptionNames& names)
    : tasks_(std::move(tasks)), shots_(shots) {
  for (size_t t = 0; t < tasks_.size(); ++t) {
    const Task& task = tasks_[t];
    if (shots > 0 && static_cast<size_t>(shots) >= task.items.size()) {
      input_error(names.num_fewshot, " ", shots, ": '", task.path, "' has ", task.items.size(),
                  " items (within ", names.limit, "), and each item's examples are ", shots,
                  " of the others; give fewer examples, or more items");
    }
    for (size_t i = 0; i < task.items.size(); ++i) {
      const TaskItem& item = task.items[i];
      const std::string where = detail::concat(names.tasks, " '", task.path, "' line ", item.line);
      const std::string context = fewshot_context(task, i, shots, seed);
      for (size_t c = 0; c < item.choices.size(); ++c) {
        const ChoiceTokens tokens =
            encode_choice(tokenizer, context, item.continuation(c), prefix, where);
        const int64_t n = static_cast<int64_t>(tokens.continuation.size());
        if (n > position_limit) {
          input_error(where, ": choice ", c, " is ", n, " tokens, more than the ", position_limit,
                      " positions of the sequence limit (", limit_source,
                      "); shorten it, or raise the limit");
        }
        Request r{t, i, c, tokens.context, n};
        r.ids.insert(r.ids.end(), tokens.continuation.begin(), tokens.continuation.end());
        // The harness keeps the last limit + 1 ids: the model reads limit of them.
        const int64_t keep = position_limit + 1;
        if (static_cast<int64_t>(r.ids.size()) > keep) {
          r.ids.erase(r.ids.begin(), r.ids.end() - keep);
        }
        longest_ = std::max<int64_t>(longest_, static_cast<int64_t>(r.ids.size()) - 1);
        requests_.push_back(std::move(r));
      }
    }
  }
  std::stable_sort(requests_.begin(), requests_.end(),
                   [](const Request& a, const Request& b) { return a.ids.size() > b.ids.size(); });
}

std::vector<TaskBatch> TaskScoring::batches(int64_t batch_size, int64_t seq_multiple) const {
  TT_CHECK(batch_size > 0 && seq_multiple > 0, "task batches: batch size ", batch_size,
           " and sequence multiple ", seq_multiple, " must be positive");
  std::vector<TaskBatch> out;
  for (size_t begin = 0; begin < requests_.size(); begin += static_cast<size_t>(batch_size)) {
    TaskBatch b;
    b.begin = begin;
    b.end = std::min(requests_.size(), begin + static_cast<size_t>(batch_size));
    b.rows = static_cast<int64_t>(b.end - b.begin);
    const int64_t longest = static_cast<int64_t>(requests_[begin].ids.size()) - 1;  // longest first
    b.seq_len = (longest + seq_multiple - 1) / seq_multiple * seq_multiple;
    out.push_back(b);
  }
  return out;
}

std::pair<Tensor, Tensor> TaskScoring::batch_tokens(const TaskBatch& batch) const {
  const int64_t B = batch.rows, S = batch.seq_len;
  Tensor tokens = Tensor::zeros({B, S}, DType::I32);   // [B, S]
  Tensor targets = Tensor::zeros({B, S}, DType::I32);  // [B, S]
  for (int64_t b = 0; b < B; ++b) {
    const Request& r = requests_[batch.begin + static_cast<size_t>(b)];
    const int64_t L = static_cast<int64_t>(r.ids.size()) - 1;
    std::copy_n(r.ids.begin(), L, tokens.data<int32_t>() + b * S);
    std::copy_n(r.ids.begin() + 1, L, targets.data<int32_t>() + b * S);
  }
  return {tokens, targets};
}

int64_t TaskScoring::real_tokens(const TaskBatch& batch) const {
  int64_t n = 0;
  for (size_t i = batch.begin; i < batch.end; ++i) {
    n += static_cast<int64_t>(requests_[i].ids.size()) - 1;
  }
  return n;
}

void TaskScoring::add_losses(const TaskBatch& batch, const Tensor& losses,
                             const std::vector<int64_t>& positions,
                             std::vector<double>& sums) const {
  const int64_t B = batch.rows;
  const int64_t n = positions.empty() ? batch.seq_len : static_cast<int64_t>(positions.size());
  TT_CHECK(losses.ndim() == 2 && losses.size(0) == B && losses.size(1) == n &&
               losses.device().is_cpu() && sums.size() == requests_.size(),
           "task scoring: token losses must be [B, n] = [", B, ", ", n, "] on the host, got ",
           losses);
  const Tensor rows = losses.contiguous();
  for (int64_t b = 0; b < B; ++b) {
    const size_t index = batch.begin + static_cast<size_t>(b);
    const Request& r = requests_[index];
    const int64_t L = static_cast<int64_t>(r.ids.size()) - 1;
    const int64_t first = L - r.continuation;  // the continuation's positions: [first, L)
    double sum = 0;
    visit_floating(rows.dtype(), "token losses", [&]<class T>() {
      const T* row = rows.data<T>() + b * n;
      for (int64_t j = 0; j < n; ++j) {
        const int64_t s = positions.empty() ? j : positions[static_cast<size_t>(j)];
        if (s >= first && s < L) sum += static_cast<double>(row[j]);
      }
    });
    sums[index] += sum;
  }
}

std::vector<TaskResult> TaskScoring::results(const std::vector<double>& sums) const {
  TT_CHECK(sums.size() == requests_.size(), "task scoring: ", sums.size(), " sums for ",
           requests_.size(), " requests");
  std::vector<TaskResult> results(tasks_.size());
  for (size_t t = 0; t < tasks_.size(); ++t) {
    results[t].task = &tasks_[t];
    results[t].shots = shots_;
    for (const TaskItem& item : tasks_[t].items) {
      results[t].logliks.emplace_back(item.choices.size(), 0.0);
      results[t].continuation_tokens.emplace_back(item.choices.size(), 0);
    }
  }
  for (size_t i = 0; i < requests_.size(); ++i) {
    const Request& r = requests_[i];
    results[r.task].logliks[r.item][r.choice] = -sums[i];
    results[r.task].continuation_tokens[r.item][r.choice] = r.continuation;
  }
  for (TaskResult& r : results) r.metrics = task_metrics(r.task->items, r.logliks);
  return results;
}

std::vector<TaskResult> TaskScoring::run(const Forward& forward, int64_t batch_size,
                                         TaskScoringStats& stats) const {
  const auto start = std::chrono::steady_clock::now();
  stats.requests = requests();
  std::vector<double> sums(requests_.size(), 0.0);
  for (const TaskBatch& batch : batches(batch_size)) {
    const auto [tokens, targets] = batch_tokens(batch);
    add_losses(batch, forward(tokens, targets), {}, sums);
    stats.tokens += real_tokens(batch);
    stats.padded_tokens += batch.rows * batch.seq_len;
    ++stats.batches;
  }
  std::vector<TaskResult> out = results(sums);
  stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return out;
}

std::string task_item_record(const TaskResult& result, size_t item) {
  // JSON has no NaN or Infinity.
  auto number = [](double v) { return std::isfinite(v) ? json_number(v) : std::string("null"); };
  const TaskItem& it = result.task->items.at(item);
  std::string out = "{\"task\": ";
  append_json_string(out, result.task->name);
  out += ", \"line\": " + std::to_string(it.line) + ", \"label\": " + std::to_string(it.label);
  out += ", \"loglik\": [";
  for (size_t c = 0; c < it.choices.size(); ++c) {
    out += (c > 0 ? ", " : "") + number(result.logliks[item][c]);
  }
  out += "], \"continuation_tokens\": [";
  for (size_t c = 0; c < it.choices.size(); ++c) {
    out += (c > 0 ? ", " : "") + std::to_string(result.continuation_tokens[item][c]);
  }
  out += "], \"choice_bytes\": [";
  for (size_t c = 0; c < it.choices.size(); ++c) {
    out += (c > 0 ? ", " : "") + std::to_string(it.choices[c].size());
  }
  out += "]}";
  return out;
}

}  // namespace titan::data
