// A simulated schedule as one text table: a column per rank, a row per time unit, each cell the
// compute that rank runs then ("F s0 m1", "B s1 m0", "I …", "W …"; a compute costing several
// units fills as many rows) or "." when it is idle; sends and receives take no time and do not
// appear. The simulator's figures follow. This is what a --print-pipeline-schedule flag shows.
#pragma once

#include <string>

#include "parallel/pipeline/schedule.h"
#include "parallel/pipeline/schedule_simulator.h"

namespace titan::parallel::pipeline {

// The heading line, the table, and the figures (makespan, bubble, peak held activations),
// each line ending in '\n'.
std::string schedule_table(const PipelineSchedule& schedule, const Simulation& simulation);

// Only the figures: "makespan 12, bubble 0.250 (…), peak held microbatches …".
std::string schedule_figures(const Simulation& simulation);

}  // namespace titan::parallel::pipeline
