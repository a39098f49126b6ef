// The pipeline of a run (parallelism.pipeline_parallel_*): how the layers split into stages
// (torchtitan's rules), which stages each pp rank holds, and every rank's action list, proven by
// the simulator — all decided and checked from the config alone, before the mesh or the model
// exist, each refusal one line naming the keys to change (docs/pipeline.md).
#pragma once

#include <string>
#include <vector>

#include "app/config.h"
#include "model/config.h"
#include "model/transformer.h"
#include "parallel/pipeline/schedule.h"
#include "parallel/pipeline/schedule_simulator.h"
#include "parallel/pipeline/stage_split.h"

namespace titan::app {

struct PipelinePlan {
  std::vector<parallel::pipeline::StageLayers> stages;  // [pp·v] in pipeline order
  parallel::pipeline::PipelineSchedule schedule;        // every pp rank's actions
  parallel::pipeline::Simulation simulation;            // its proof, bubble and peak
  int64_t microbatch_size = 1;                          // sequences per microbatch

  int64_t microbatches() const { return schedule.microbatches; }
  // The stages pp rank `rank` holds, in its local order.
  std::vector<int64_t> stages_of(int64_t rank) const { return schedule.placement.stages_of(rank); }
};

// The plan of `config` for `args` (pp = parallelism.pipeline_parallel_degree; it may be 1).
// InputError, one line naming the parallelism.pipeline_parallel_* and training.* keys at fault,
// when the layers do not split under the chosen rules, the local batch does not split into
// microbatches, there are fewer microbatches than stages for the schedule to fill, the schedule
// cannot run the stages per rank, or the generated lists fail the simulator.
PipelinePlan plan_pipeline(const JobConfig& config, const model::ModelArgs& args);

// The part of the model a stage holds.
model::ModelPart model_part(const parallel::pipeline::StageLayers& stage);

// What --print-pipeline-schedule prints: the split, each rank's stages, the simulated table and
// its figures.
std::string pipeline_report(const JobConfig& config, const model::ModelArgs& args);

}  // namespace titan::app
