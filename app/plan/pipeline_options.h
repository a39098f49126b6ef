// The trade a pipeline job chooses between, planned side by side: every schedule with each
// gradient reduction (parallelism.pipeline_parallel_gradient_reduction), the same job
// otherwise. titan_train --plan prints it under pipeline parallelism, after the plan of the
// configured choice, so that the memory one choice saves and the time it costs read together
// (docs/pipeline.md, "A plan for Llama 3 405B on 512 H100s").
#pragma once

#include <string>
#include <vector>

#include "app/plan/devices.h"
#include "app/plan/memory_plan.h"
#include "app/plan/plan_job.h"
#include "app/plan/step_time.h"

namespace titan::app::plan {

struct PipelineOption {
  parallel::pipeline::ScheduleKind schedule{};
  parallel::PipelineGradientReduction reduction{};
  bool plannable = false;  // the schedule takes the job's split and microbatches
  std::string why_not;     // when not: the refusal, one line
  MemoryPlan memory;       // of the pp rank that holds the most
  StepTime time;
};

// Every schedule × gradient reduction of `job` (pp > 1), in the order of the schedule table and
// the reductions' names; the gradient reduction only where FSDP shards (else one row a schedule).
std::vector<PipelineOption> pipeline_options(const PlanJob& job, const DeviceSpec& device);

// The table: one row an option, its memory against the device and its tokens/s per device,
// the job's own choice marked.
std::string format_pipeline_options(const PlanJob& job, const DeviceSpec& device,
                                    const std::vector<PipelineOption>& options);

}  // namespace titan::app::plan
