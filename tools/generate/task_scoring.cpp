#include "tools/generate/task_scoring.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>

#include "core/check.h"
#include "core/dispatch.h"

namespace titan::generate {

TaskScoring::TaskScoring(std::vector<data::Task> tasks, const data::Tokenizer& tokenizer,
                         std::optional<int32_t> prefix, int64_t position_limit,
                         const std::string& limit_source, int64_t shots, uint64_t seed)
    : tasks_(std::move(tasks)), shots_(shots) {
  for (size_t t = 0; t < tasks_.size(); ++t) {
    const data::Task& task = tasks_[t];
    if (shots > 0 && static_cast<size_t>(shots) >= task.items.size()) {
      input_error("--num-fewshot ", shots, ": '", task.path, "' has ", task.items.size(),
                  " items (within --limit), and each item's examples are ", shots,
                  " of the others; give fewer examples, or more items");
    }
    for (size_t i = 0; i < task.items.size(); ++i) {
      const data::TaskItem& item = task.items[i];
      const std::string where = detail::concat("--tasks '", task.path, "' line ", item.line);
      const std::string context = data::fewshot_context(task, i, shots, seed);
      for (size_t c = 0; c < item.choices.size(); ++c) {
        const data::ChoiceTokens tokens =
            data::encode_choice(tokenizer, context, item.continuation(c), prefix, where);
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

std::vector<TaskResult> TaskScoring::run(model::Transformer& model, int64_t batch_size,
                                         TaskScoringStats& stats) const {
  std::vector<TaskResult> results(tasks_.size());
  for (size_t t = 0; t < tasks_.size(); ++t) {
    results[t].task = &tasks_[t];
    results[t].shots = shots_;
    for (const data::TaskItem& item : tasks_[t].items) {
      results[t].logliks.emplace_back(item.choices.size(), 0.0);
      results[t].continuation_tokens.emplace_back(item.choices.size(), 0);
    }
  }
  const auto start = std::chrono::steady_clock::now();
  stats.requests = requests();
  for (size_t begin = 0; begin < requests_.size(); begin += static_cast<size_t>(batch_size)) {
    const size_t end = std::min(requests_.size(), begin + static_cast<size_t>(batch_size));
    const int64_t B = static_cast<int64_t>(end - begin);
    const int64_t S = static_cast<int64_t>(requests_[begin].ids.size()) - 1;  // longest first
    // Padding reads token 0 and predicts token 0: rows past a request's end are never summed.
    Tensor tokens = Tensor::zeros({B, S}, DType::I32);   // [B, S]
    Tensor targets = Tensor::zeros({B, S}, DType::I32);  // [B, S]
    for (int64_t b = 0; b < B; ++b) {
      const Request& r = requests_[begin + static_cast<size_t>(b)];
      const int64_t L = static_cast<int64_t>(r.ids.size()) - 1;
      std::copy_n(r.ids.begin(), L, tokens.data<int32_t>() + b * S);
      std::copy_n(r.ids.begin() + 1, L, targets.data<int32_t>() + b * S);
      stats.tokens += L;
    }
    const Tensor losses = model.evaluate_tokens(tokens, targets);  // [B, S] on the host
    for (int64_t b = 0; b < B; ++b) {
      const Request& r = requests_[begin + static_cast<size_t>(b)];
      const int64_t L = static_cast<int64_t>(r.ids.size()) - 1;
      double sum = 0;
      visit_floating(losses.dtype(), "token losses", [&]<class T>() {
        const T* row = losses.data<T>() + b * S;
        for (int64_t s = L - r.continuation; s < L; ++s) sum += static_cast<double>(row[s]);
      });
      results[r.task].logliks[r.item][r.choice] = -sum;
      results[r.task].continuation_tokens[r.item][r.choice] = r.continuation;
    }
    stats.padded_tokens += B * S;
    ++stats.batches;
  }
  stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (TaskResult& r : results) r.metrics = data::task_metrics(r.task->items, r.logliks);
  return results;
}

std::string task_table(const std::vector<TaskResult>& results) {
  size_t width = 4;
  for (const TaskResult& r : results) width = std::max(width, r.task->name.size());
  auto row = [&](const std::string& name, const std::string& rest) {
    std::string line = name;
    line.resize(width, ' ');
    return line + rest + "\n";
  };
  char buffer[160];
  std::snprintf(buffer, sizeof(buffer), " %7s %8s %8s %9s %8s", "n", "acc", "stderr",
                "acc_norm", "stderr");
  std::string out = row("task", buffer);
  for (const TaskResult& r : results) {
    const data::TaskMetrics& m = r.metrics;
    std::snprintf(buffer, sizeof(buffer), " %7lld %8.4f ±%7.4f %9.4f ±%7.4f",
                  static_cast<long long>(m.n), m.acc, m.acc_stderr, m.acc_norm,
                  m.acc_norm_stderr);
    out += row(r.task->name, buffer);
  }
  return out;
}

}  // namespace titan::generate
