// eval.tasks: multiple-choice tasks scored during training, on whatever mesh the run has, as
// titan_generate --tasks scores them on one rank (data/task_scoring.h holds what both share;
// TrainStep::task_loss_sums runs the mesh's forward). The task files are read and every choice
// encoded when the trainer sets up, before any model is allocated, so a bad file costs a second:
// InputError naming eval.tasks, the file, the line and the field.
//
// After step 1 and every eval.freq-th step, each task's acc and acc_norm join that step's metrics
// as eval/<task>/acc and eval/<task>/acc_norm (JSON lines, TensorBoard), with eval_s, the time
// the scoring took; with eval.task_scores rank 0 also writes every item's per-choice sums.
#pragma once

#include <cstdint>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "app/config.h"
#include "app/metrics/metric_sink.h"
#include "app/train_step.h"
#include "data/task_scoring.h"
#include "data/tokenizer.h"
#include "model/config.h"

namespace titan::app {

class TaskEvaluation {
 public:
  // Reads eval.tasks and encodes every choice with `tokenizer` under the sequence limit a
  // Hugging Face export of `args` declares (what titan_generate reads from this run's
  // checkpoints). `writes`: this rank writes eval.task_scores, appending to it when `append`
  // (a run resumed from its own checkpoint, as the metrics file).
  TaskEvaluation(const JobConfig& config, const data::Tokenizer& tokenizer,
                 const model::ModelArgs& args, bool writes, bool append);

  // After step 1 and every eval.freq-th step.
  bool due(int64_t step) const;
  // Scores every task after step `step`'s training: the per-task lines logged by `logging`
  // ranks, eval.task_scores written, and the metrics' scalars returned (eval/<task>/acc,
  // eval/<task>/acc_norm). Collective: every rank calls it at the same steps.
  std::vector<Scalar> run(TrainStep& step_runner, int64_t step, bool logging);

  int64_t tasks() const { return static_cast<int64_t>(scoring_->tasks().size()); }
  int64_t requests() const { return scoring_->requests(); }

 private:
  const JobConfig& config_;
  std::unique_ptr<data::TaskScoring> scoring_;
  std::unique_ptr<std::ofstream> task_scores_;  // eval.task_scores, on the writing rank
};

}  // namespace titan::app
