#include "app/plan/pipeline_options.h"

#include <fmt/format.h>

#include "app/plan/plan_report.h"
#include "core/check.h"

namespace titan::app::plan {

std::vector<PipelineOption> pipeline_options(const PlanJob& job, const DeviceSpec& device) {
  TT_CHECK(job.mesh.pp > 1, "pipeline_options: a job without pipeline parallelism");
  std::vector<parallel::PipelineGradientReduction> reductions;
  for (const auto& r : parallel::kPipelineGradientReductionList) {
    reductions.push_back(r.value);
    // Without FSDP the gradients stay with their replicas: the choice changes nothing.
    if (job.mesh.dims().fsdp_shards() == 1) break;
  }
  std::vector<PipelineOption> options;
  for (const auto& [s, name] : parallel::pipeline::kScheduleKindNames.entries()) {
    for (parallel::PipelineGradientReduction r : reductions) {
      PipelineOption o;
      o.schedule = s;
      o.reduction = r;
      JobConfig config = job.config;
      config.parallelism.pipeline_parallel_schedule = s;
      config.parallelism.pipeline_parallel_gradient_reduction = r;
      try {
        const PlanJob option = plan_job(config, job.mesh);
        o.memory = plan_memory(option, device.cuda);
        o.time = estimate_step_time(option, device);
        o.plannable = true;
      } catch (const InputError& e) {
        o.why_not = e.what();
      }
      options.push_back(std::move(o));
    }
  }
  return options;
}

std::string format_pipeline_options(const PlanJob& job, const DeviceSpec& device,
                                    const std::vector<PipelineOption>& options) {
  const JobConfig::Parallelism& p = job.config.parallelism;
  std::string out;
  auto line = [&out](const std::string& text) { out += text + "\n"; };
  line(fmt::format(
      "pipeline options (the same job; memory of the pp rank that holds the most, against {}):",
      format_bytes(device.memory_bytes)));
  line(fmt::format("  {:<24}{:<22}{:>12}{:>10}{:>16}", "schedule", "gradient reduction", "memory",
                   "bubble", "tokens/s/device"));
  for (const PipelineOption& o : options) {
    const std::string schedule(parallel::pipeline::kScheduleKindNames.name(o.schedule));
    const std::string reduction(parallel::kPipelineGradientReductions.name(o.reduction));
    const bool chosen = o.schedule == p.pipeline_parallel_schedule &&
                        o.reduction == p.pipeline_parallel_gradient_reduction;
    if (!o.plannable) {
      line(fmt::format("  {:<24}{:<22}not plannable: {}", schedule, reduction, o.why_not));
      continue;
    }
    const bool fits = o.memory.total() <= device.memory_bytes;
    line(fmt::format("  {:<24}{:<22}{:>12}{:>9.1f}%{:>16.0f}{}{}", schedule, reduction,
                     format_bytes(o.memory.total()), 100 * o.time.pipeline_bubble,
                     o.time.tokens_per_s_per_device, fits ? "" : "  (does not fit)",
                     chosen ? "  <- this job" : ""));
  }
  return out;
}

}  // namespace titan::app::plan
