#include "app/metrics/metrics_processor.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cctype>
#include <ctime>

#include "core/byte_units.h"
#include "core/progress.h"
#include "parallel/pipeline/schedule_simulator.h"

namespace titan::app {

namespace {

// Steps timed before the run-time estimate is logged, after the first (which warms up).
constexpr int64_t kEstimateSteps = 3;

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

}  // namespace

double peak_bf16_tflops(std::string_view device_name) {
  // Substring tests in torchtitan's order, case-insensitive so that CUDA's "NVIDIA L40S" finds
  // the L40S entry (torchtitan tests for "l40s"). Dense figures: NVIDIA's datasheets quote
  // twice these with 2:4 sparsity.
  const std::string name = lower(device_name);
  auto has = [&name](std::string_view part) { return name.find(part) != std::string::npos; };
  if (has("a100")) return 312;
  if (has("h100")) {
    if (has("nvl")) return 835;
    if (has("pcie")) return 756;
    return 989;  // SXM ("NVIDIA H100 80GB HBM3") and other variants
  }
  if (has("h200")) return 989;
  if (has("b200")) return 2250;
  if (has("l40s")) return 362;
  return 0;
}

StepReport make_step_report(const RunFacts& facts, int64_t step, double loss, double grad_norm,
                            double lr, const StepWindow& window) {
  StepReport r;
  r.step = step;
  auto add = [&r](const char* name, double value) { r.scalars.push_back({name, value}); };
  add("loss", loss);
  add("grad_norm", grad_norm);
  add("lr", lr);
  add("tokens", facts.tokens_per_step * static_cast<double>(step));
  const double tokens_per_s =
      facts.tokens_per_step * static_cast<double>(window.steps) / window.seconds;
  const double per_device = tokens_per_s / static_cast<double>(facts.world_size);
  add("tokens_per_s", tokens_per_s);
  add("tokens_per_s_per_device", per_device);
  const double step_seconds = window.seconds / static_cast<double>(window.steps);
  add("step_ms", 1000.0 * step_seconds);
  if (window.tp_wait_seconds >= 0) {
    add("tp_wait_ms", 1000.0 * window.tp_wait_seconds / static_cast<double>(window.steps));
  }
  if (window.cp_wait_seconds >= 0) {
    add("cp_wait_ms", 1000.0 * window.cp_wait_seconds / static_cast<double>(window.steps));
  }
  if (window.pp_wait_seconds >= 0) {
    add("pp_wait_ms", 1000.0 * window.pp_wait_seconds / static_cast<double>(window.steps));
    r.scalars.push_back(
        {"pp_bubble", parallel::pipeline::measured_bubble(window.pp_seconds, window.pp_wait)});
    for (size_t rank = 0; rank < window.pp_seconds.size(); ++rank) {
      const double seconds = window.pp_seconds[rank];
      r.scalars.push_back({"pp_bubble_r" + std::to_string(rank),
                           seconds > 0 ? window.pp_wait[rank] / seconds : 0.0});
    }
  }
  add("peak_mem_gib", window.peak_bytes / kGiB);
  if (facts.device_bytes > 0) {
    add("peak_mem_pct", 100.0 * window.peak_bytes / static_cast<double>(facts.device_bytes));
  }
  const double tflops = facts.flops_per_token * per_device / 1e12;
  add("tflops", tflops);
  if (facts.peak_tflops > 0) add("mfu", 100.0 * tflops / facts.peak_tflops);
  if (facts.attention_keys > 0) add("mfu_attention_keys", facts.attention_keys);
  add("elapsed_s", window.elapsed_seconds);
  add("eta_s", step_seconds * static_cast<double>(facts.last_step - step));
  return r;
}

MetricsProcessor::MetricsProcessor(RunFacts facts, Allocator& memory,
                                   std::function<double(double)> max_over_ranks,
                                   std::vector<std::unique_ptr<MetricSink>> sinks,
                                   bool logging_rank)
    : facts_(facts),
      memory_(memory),
      max_over_ranks_(std::move(max_over_ranks)),
      sinks_(std::move(sinks)),
      logging_rank_(logging_rank) {}

void MetricsProcessor::write_config(const std::string& yaml) {
  for (auto& sink : sinks_) sink->write_config(yaml);
}

void MetricsProcessor::start() {
  run_start_ = window_start_ = Clock::now();
  window_steps_ = 0;
  memory_.reset_peak();
}

bool MetricsProcessor::reports(int64_t step) const {
  return step == facts_.first_step || step % facts_.log_freq == 0 || step == facts_.last_step;
}

std::optional<StepReport> MetricsProcessor::end_step(int64_t step, double loss, double grad_norm,
                                                     double lr) {
  const Clock::time_point now = Clock::now();
  ++window_steps_;
  const int64_t done = step - facts_.first_step + 1;  // steps of this run
  if (done == 1) first_step_end_ = now;
  if (done == 1 + kEstimateSteps && step < facts_.last_step && !estimate_logged_ && logging_rank_) {
    estimate_logged_ = true;
    const double per_step =
        std::chrono::duration<double>(now - first_step_end_).count() / kEstimateSteps;
    const double elapsed = std::chrono::duration<double>(now - run_start_).count();
    const double remaining = per_step * static_cast<double>(facts_.last_step - step);
    spdlog::info(
        "estimated run time {} for steps {}..{} ({:.3g} s/step after the first); "
        "done in about {}",
        format_duration(elapsed + remaining), facts_.first_step, facts_.last_step, per_step,
        format_duration(remaining));
  }
  const bool validated = validation_ && validation_->step == step;
  const bool skipped = skipped_step_ == step;
  const bool evaluated = task_scores_ && task_scores_->step == step;
  if (!reports(step) && !validated && !skipped && !evaluated) return std::nullopt;

  StepWindow window;
  window.steps = window_steps_;
  // Validation's time is not training time; the floor only keeps a rate finite.
  window.seconds = std::max(
      std::chrono::duration<double>(now - window_start_).count() - window_excluded_seconds_, 1e-9);
  window.elapsed_seconds = std::chrono::duration<double>(now - run_start_).count();
  window.peak_bytes = max_over_ranks_(static_cast<double>(memory_.stats().peak_bytes));
  if (tensor_parallel_) window.tp_wait_seconds = max_over_ranks_(window_tp_wait_seconds_);
  if (context_parallel_) window.cp_wait_seconds = max_over_ranks_(window_cp_wait_seconds_);
  if (max_per_pp_rank_) {
    window.pp_wait_seconds = max_over_ranks_(window_pp_wait_seconds_);
    window.pp_wait = max_per_pp_rank_(window_pp_wait_seconds_);
    window.pp_seconds = max_per_pp_rank_(window_pp_seconds_);
  }
  StepReport report = make_step_report(facts_, step, loss, grad_norm, lr, window);
  if (validated) {
    for (const auto& [key, loss] : validation_->losses) report.scalars.push_back({key, loss});
  }
  if (evaluated) {
    for (Scalar& scalar : task_scores_->scalars) report.scalars.push_back(std::move(scalar));
    report.scalars.push_back({"eval_s", task_scores_->seconds});
  }
  if (skipped_total_ > 0) {
    report.scalars.push_back({"skipped_steps", static_cast<double>(skipped_total_)});
  }
  if (trailing_scalars_) {
    for (Scalar& scalar : trailing_scalars_()) report.scalars.push_back(std::move(scalar));
  }
  validation_.reset();
  task_scores_.reset();
  for (auto& sink : sinks_) sink->write(report);
  // The next window starts after the sinks wrote, so their time is nobody's step time.
  window_start_ = Clock::now();
  window_steps_ = 0;
  window_excluded_seconds_ = 0;
  window_tp_wait_seconds_ = 0;
  window_cp_wait_seconds_ = 0;
  window_pp_seconds_ = window_pp_wait_seconds_ = 0;
  memory_.reset_peak();
  return report;
}

void MetricsProcessor::set_validation_loss(int64_t step, double loss, double seconds) {
  set_validation_losses(step, {{"val_loss", loss}}, seconds);
}

void MetricsProcessor::set_validation_losses(int64_t step,
                                             std::vector<std::pair<std::string, double>> losses,
                                             double seconds) {
  validation_ = ValidationLoss{step, std::move(losses)};
  window_excluded_seconds_ += seconds;
}

void MetricsProcessor::set_task_scores(int64_t step, std::vector<Scalar> scalars,
                                       double seconds) {
  task_scores_ = TaskScores{step, std::move(scalars), seconds};
  window_excluded_seconds_ += seconds;
}

void MetricsProcessor::set_trailing_scalars(std::function<std::vector<Scalar>()> scalars) {
  trailing_scalars_ = std::move(scalars);
}

void MetricsProcessor::note_skipped_step(int64_t step, int64_t total) {
  skipped_step_ = step;
  skipped_total_ = total;
}

void MetricsProcessor::add_tp_wait(double seconds) {
  tensor_parallel_ = true;
  window_tp_wait_seconds_ += seconds;
}

void MetricsProcessor::add_cp_wait(double seconds) {
  context_parallel_ = true;
  window_cp_wait_seconds_ += seconds;
}

void MetricsProcessor::set_pipeline(std::function<std::vector<double>(double)> max_per_pp_rank) {
  max_per_pp_rank_ = std::move(max_per_pp_rank);
}

void MetricsProcessor::add_pipeline_time(double seconds, double wait_seconds) {
  window_pp_seconds_ += seconds;
  window_pp_wait_seconds_ += wait_seconds;
}

void MetricsProcessor::flush() {
  for (auto& sink : sinks_) sink->flush();
}

}  // namespace titan::app
