// What a training step reports, computed once (docs/architecture.md#decision-14).
//
// The trainer tells the processor that a step ended (its loss, gradient norm and lr); on the
// steps that report — the first, every metrics.log_freq-th, the last — the processor turns the
// window of steps since the last report into one StepReport and hands it to every sink
// (console, JSON lines, TensorBoard: app/metrics/metric_sink.h). Keys, in order:
//
//   loss, grad_norm, lr                     this step's
//   tokens                                  trained so far, counting steps before a resume
//   tokens_per_s, tokens_per_s_per_device   over the window (torchtitan's "tps" per device)
//   step_ms                                 mean wall time per step over the window
//   tp_wait_ms?                             of it, the mean time per step the busiest rank sat
//                                           waiting on tensor-parallel communication that compute
//                                           did not hide (synchronous and async TP alike; tp > 1)
//   cp_wait_ms?                             of it, the mean time per step the busiest rank sat
//                                           waiting on context-parallel K/V (and dK/dV) transfers
//                                           that attention did not hide (cp > 1); on CUDA both
//                                           are the time the compute stream stood still at the
//                                           waits, timed by events (core/wait_clock.h)
//   pp_wait_ms?                             of it, the mean time per step the busiest rank sat
//                                           waiting on a pipeline stage's messages (pp > 1)
//   pp_bubble?                              the pipeline's idle share in the simulator's terms:
//                                           1 − the pp ranks' compute / (pp × the slowest
//                                           one's pipeline time), the measured bubble (pp > 1)
//   pp_bubble_r<R>?                         per pp rank R, the share of its own pipeline time
//                                           it waited on a message (pp > 1)
//   peak_mem_gib, peak_mem_pct?             most tensor bytes held at once on one device in the
//                                           window (the busiest rank), and as a share of it
//   tflops, mfu?                            model TFLOP/s per device, and 100 · tflops / peak
//   mfu_attention_keys?                     the keys per token their attention FLOPs count, when
//                                           not the window's S (block_causal: the documents')
//   elapsed_s, eta_s                        since this run started; remaining steps at the
//                                           window's rate
//   val_loss?                               the validation loss computed after this step
//   eval/<task>/acc?, eval/<task>/acc_norm? each eval.tasks task's, scored after this step
//   eval_s?                                 the seconds that scoring took
//   skipped_steps?                          non-finite steps skipped so far (after the first;
//                                           training.skip_nonfinite_steps)
//   source_tokens/<name>?                   a mixture's (data.sources) tokens trained so far
//                                           from each source, counting steps before a resume
//
// With validation.sources, val_loss is val_loss/<name>, one per held-out set.
//
// `?`: only where the device makes it known (a GPU's memory and bf16 peak), or, for val_loss,
// on the steps that validate (set_validation_loss; such a step always reports), and for the
// eval keys on the steps that score eval.tasks (set_task_scores). Keys are only
// ever added, so readers of older metrics files keep working.
//
// Throughput follows torchtitan: the model FLOPs of a token (model::training_flops_per_token)
// times the tokens per second of one device give the achieved TFLOP/s, and MFU divides that by
// the device's dense bf16 peak, for FP8 runs too, as torchtitan reports them.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "app/metrics/metric_sink.h"
#include "core/allocator.h"

namespace titan::app {

// The dense bf16 tensor-core peak, in TFLOP/s, of a CUDA device by its name
// (cudaDeviceProp::name, e.g. "NVIDIA H100 80GB HBM3"), as torchtitan's get_peak_flops
// (torchtitan/tools/utils.py): A100 312; H100 NVL 835, H100 PCIe 756, other H100 (SXM) 989;
// H200 989; B200 2250; L40S 362. 0 for any other name (and for "cpu"): MFU is then not reported,
// where torchtitan would assume an A100.
double peak_bf16_tflops(std::string_view device_name);

// The facts of a run that its figures are computed from, fixed at start.
struct RunFacts {
  double tokens_per_step = 0;  // global batch × seq_len
  double flops_per_token = 0;  // model::training_flops_per_token
  // The keys per token that count took for attention when it was not the window's S
  // (block_causal: the data's documents, Σ n²/S); reported beside mfu. 0: the window's.
  double attention_keys = 0;
  double peak_tflops = 0;  // the device's bf16 dense peak; 0 when unknown (the CPU)
  int64_t world_size = 1;
  int64_t device_bytes = 0;  // the device's memory; 0 when not known (the CPU)
  int64_t first_step = 1;    // this run's first step (later than 1 when resumed)
  int64_t last_step = 1;     // training.steps
  int64_t log_freq = 10;
};

// One window of steps, as measured: what a report is computed from.
struct StepWindow {
  int64_t steps = 0;            // steps in the window, this one included
  double seconds = 0;           // their wall time
  double peak_bytes = 0;        // the busiest rank's most tensor bytes held at once
  double elapsed_seconds = 0;   // since this run's first step began
  double tp_wait_seconds = -1;  // the busiest rank's tp wait over the window; < 0: no tp
  double cp_wait_seconds = -1;  // the busiest rank's cp wait over the window; < 0: no cp
  double pp_wait_seconds = -1;  // the busiest rank's pipeline wait over the window; < 0: no pp
  // Per pp rank: its pipeline time over the window, and of it the time it waited on messages.
  std::vector<double> pp_seconds = {};
  std::vector<double> pp_wait = {};
};

// The report of `step`, which ended `window`. Pure: the figures above, from these numbers.
StepReport make_step_report(const RunFacts& facts, int64_t step, double loss, double grad_norm,
                            double lr, const StepWindow& window);

class MetricsProcessor {
 public:
  // `memory` is this rank's training device's allocator; `max_over_ranks` returns the maximum
  // of a value over every rank (a collective: every rank calls end_step on the same steps).
  // `logging_rank` logs the run-time estimate (the sinks decide for themselves where they write).
  MetricsProcessor(RunFacts facts, Allocator& memory, std::function<double(double)> max_over_ranks,
                   std::vector<std::unique_ptr<MetricSink>> sinks, bool logging_rank);

  void write_config(const std::string& yaml);
  // The clock and the memory peak start now.
  void start();
  // Whether `step` reports: the first of the run, every log_freq-th, and the last.
  bool reports(int64_t step) const;
  // Step `step` has ended (on a GPU, its work finished: the caller synchronises on report steps).
  // On report steps, computes the report and writes it to every sink, and returns it.
  std::optional<StepReport> end_step(int64_t step, double loss, double grad_norm, double lr);
  // Validation ran after step `step`'s training, before end_step(step): its mean loss joins that
  // step's report as val_loss, and the step reports even where log_freq would skip it. Its
  // `seconds` are left out of the window's step time, throughput and MFU (they stay in
  // elapsed_s), so validating does not read as slower training.
  void set_validation_loss(int64_t step, double loss, double seconds);
  // Several held-out sets (validation.sources): each loss under its own key (val_loss/<name>),
  // as set_validation_loss otherwise.
  void set_validation_losses(int64_t step, std::vector<std::pair<std::string, double>> losses,
                             double seconds);
  // eval.tasks were scored after step `step`'s training, before end_step(step): their scalars
  // (eval/<task>/acc, eval/<task>/acc_norm) and eval_s join that step's report, which reports
  // even where log_freq would skip it; `seconds` are left out of the window as validation's.
  void set_task_scores(int64_t step, std::vector<Scalar> scalars, double seconds);
  // Scalars every report ends with, read when it is made (a mixture's source_tokens/<name>:
  // the same on every rank, so no collective).
  void set_trailing_scalars(std::function<std::vector<Scalar>()> scalars);
  // Step `step` was skipped for a non-finite loss or gradient norm, the `total`-th so far (before
  // end_step(step)): it reports even where log_freq would skip it, and from it on every report
  // carries skipped_steps.
  void note_skipped_step(int64_t step, int64_t total);
  // This rank waited `seconds` on tensor-parallel communication during the step that is
  // running (the step takes it from parallel::CommWaits); reported as tp_wait_ms once called.
  void add_tp_wait(double seconds);
  // The same for context-parallel transfers: cp_wait_ms.
  void add_cp_wait(double seconds);
  // Pipeline parallelism: `max_per_pp_rank` returns, for each pp coordinate, the maximum of a
  // value over the ranks at that coordinate (a collective, as max_over_ranks).
  void set_pipeline(std::function<std::vector<double>(double)> max_per_pp_rank);
  // This rank ran its pipeline list for `seconds` in the step that is running, `wait_seconds`
  // of them waiting on messages (parallel::PipelineTiming).
  void add_pipeline_time(double seconds, double wait_seconds);
  void flush();

 private:
  using Clock = std::chrono::steady_clock;
  RunFacts facts_;
  Allocator& memory_;
  std::function<double(double)> max_over_ranks_;
  std::vector<std::unique_ptr<MetricSink>> sinks_;
  Clock::time_point run_start_;
  Clock::time_point window_start_;
  Clock::time_point first_step_end_;
  int64_t window_steps_ = 0;
  double window_excluded_seconds_ = 0;  // validation time inside the window
  double window_tp_wait_seconds_ = 0;
  bool tensor_parallel_ = false;  // add_tp_wait was called: every rank reports tp_wait_ms
  double window_cp_wait_seconds_ = 0;
  bool context_parallel_ = false;  // add_cp_wait was called: every rank reports cp_wait_ms
  std::function<std::vector<double>(double)> max_per_pp_rank_;  // set under pp
  double window_pp_seconds_ = 0, window_pp_wait_seconds_ = 0;
  struct ValidationLoss {
    int64_t step = 0;
    std::vector<std::pair<std::string, double>> losses;  // key (val_loss, val_loss/<name>), loss
  };
  std::function<std::vector<Scalar>()> trailing_scalars_;
  std::optional<ValidationLoss> validation_;  // for the step about to end
  struct TaskScores {
    int64_t step = 0;
    std::vector<Scalar> scalars;
    double seconds = 0;
  };
  std::optional<TaskScores> task_scores_;  // for the step about to end
  int64_t skipped_step_ = -1;                 // the step about to end, when it was skipped
  int64_t skipped_total_ = 0;
  bool logging_rank_;
  bool estimate_logged_ = false;
};

}  // namespace titan::app
