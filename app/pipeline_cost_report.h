// pp > 1, at the end of a run: what each kind of compute cost, the schedule simulated with those
// costs and replayed with each action's own time, against the bubble measured — one line that
// says whether the schedule or the run's timing made the idle time (docs/pipeline.md).
//
// The step records each run of the rank's action list (PipelineRuns); at the end the figures are
// summed over the job (a collective) and rank 0 writes the line. The formatting is a function
// of the summed figures alone, so a test reads it without a job.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <vector>

#include "parallel/device_mesh.h"
#include "parallel/pipeline/schedule.h"
#include "parallel/pipeline_executor.h"

namespace titan::parallel::pipeline {
struct RanCompute;
}

namespace titan::app {

// What this rank's action lists did, after the run's first step (which warms the caches and
// the allocator): their figures summed, and the order and times of the last kReplayed runs.
struct PipelineRuns {
  static constexpr size_t kReplayed = 64;
  parallel::PipelineTiming total;
  std::deque<std::vector<parallel::pipeline::RanCompute>> ran;

  void add(const parallel::PipelineTiming& run);
};

// Every rank's figures summed over the job (each kind's seconds and counts, wait, total, the Ws
// run early), and the slowest rank's pipeline time. Collective over `mesh`'s world.
struct PipelineCosts {
  parallel::PipelineTiming summed;  // `ran` empty
  double slowest_seconds = 0;
};
PipelineCosts sum_pipeline_costs(const PipelineRuns& runs, const parallel::DeviceMesh& mesh);

// The closing line, from the summed figures: the mean cost of one stage on one microbatch by
// kind, the schedule simulated with them, `replayed` (replayed_bubble_text) and the measured
// bubble of `ranks` ranks. nullopt when nothing was timed (a run of one step).
std::optional<std::string> pipeline_cost_line(const PipelineCosts& costs,
                                              const parallel::pipeline::PipelineSchedule& schedule,
                                              int64_t ranks, const std::string& replayed);

// The last runs of the pp group replayed with each action's own time, as the text the closing
// line inserts: ", and with each action's own time 0.187", ", not replayed (why)", or empty on
// other ranks than world rank 0 and when nothing ran. Collective over the pp group.
std::string replayed_bubble_text(const PipelineRuns& runs,
                                 const parallel::pipeline::PipelineSchedule& schedule,
                                 const parallel::DeviceMesh& mesh);

// For the step's figures per pp rank: each pp coordinate's maximum of `value` over the ranks at
// it. Collective over the job (a world all-gather, read by coordinate).
std::vector<double> max_per_pp_coordinate(const parallel::DeviceMesh& mesh, double value);

// The three above, logged by world rank 0. Collective over the job.
void report_pipeline_costs(const PipelineRuns& runs,
                           const parallel::pipeline::PipelineSchedule& schedule,
                           const parallel::DeviceMesh& mesh);

}  // namespace titan::app
