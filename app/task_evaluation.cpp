#include "app/task_evaluation.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <cmath>

#include "checkpoint/hf_files.h"
#include "core/check.h"
#include "core/profiler.h"

namespace titan::app {

TaskEvaluation::TaskEvaluation(const JobConfig& config, const data::Tokenizer& tokenizer,
                               const model::ModelArgs& args, bool writes, bool append)
    : config_(config) {
  const JobConfig::Eval& e = config.eval;
  if (tokenizer.vocab_size() > args.vocab_size) {
    input_error("eval.tasks: the tokenizer ", tokenizer.describe(), " has ",
                tokenizer.vocab_size(), " tokens, more than model.vocab_size ", args.vocab_size,
                "; raise model.vocab_size to at least ", tokenizer.vocab_size(),
                ", or set data.tokenizer_path to the model's tokenizer");
  }
  std::vector<data::Task> tasks;
  for (const std::string& spec : e.tasks) {
    tasks.push_back(data::read_task_spec(spec, "eval.tasks", e.limit));
  }
  const data::TaskOptionNames names{"eval.tasks", "eval.num_fewshot", "eval.limit"};
  scoring_ = std::make_unique<data::TaskScoring>(
      std::move(tasks), tokenizer, e.bos ? tokenizer.bos_id() : std::optional<int32_t>(),
      checkpoint::hf_max_position_embeddings(args),
      "the max_position_embeddings of the model's Hugging Face export", e.num_fewshot,
      static_cast<uint64_t>(e.fewshot_seed), names);
  if (writes && !e.task_scores.empty()) {
    task_scores_ = std::make_unique<std::ofstream>(
        e.task_scores, append ? std::ios::app : std::ios::trunc);
    if (!*task_scores_) {
      input_error("eval.task_scores: cannot write '", e.task_scores,
                  "'; name a file in a folder you can write");
    }
  }
}

bool TaskEvaluation::due(int64_t step) const {
  // validation.freq's cadence (torchtitan's): step 1 and every freq-th step.
  return step == 1 || step % config_.eval.freq == 0;
}

std::vector<Scalar> TaskEvaluation::run(TrainStep& step_runner, int64_t step, bool logging) {
  const auto start = std::chrono::steady_clock::now();
  const std::vector<double> sums = step_runner.task_loss_sums(*scoring_, config_.eval.batch_size);
  const std::vector<data::TaskResult> results = scoring_->results(sums);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::vector<Scalar> scalars;
  for (const data::TaskResult& r : results) {
    const data::TaskMetrics& m = r.metrics;
    scalars.push_back({"eval/" + r.task->name + "/acc", m.acc});
    scalars.push_back({"eval/" + r.task->name + "/acc_norm", m.acc_norm});
    if (logging) {
      spdlog::info("eval {}: step {}, acc {:.4f} ± {:.4f}, acc_norm {:.4f} ± {:.4f} over {} items",
                   r.task->name, step, m.acc, m.acc_stderr, m.acc_norm, m.acc_norm_stderr, m.n);
    }
    if (task_scores_) {
      for (size_t i = 0; i < r.task->items.size(); ++i) {
        // The item's record with the step it was scored after, first.
        *task_scores_ << "{\"step\": " << step << ", " << data::task_item_record(r, i).substr(1)
                      << '\n';
      }
    }
  }
  if (task_scores_) task_scores_->flush();
  if (logging) {
    spdlog::info("eval: step {}, {} task{} ({} choices) in {:.2f} s", step, results.size(),
                 results.size() == 1 ? "" : "s", scoring_->requests(), seconds);
  }
  return scalars;
}

}  // namespace titan::app
