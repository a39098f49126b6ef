// A measured run put back through the simulator: each rank's computes in the order they ran,
// each taking its own measured time, every message free. Set beside the run's measured bubble
// and the simulation at the kinds' mean costs, it splits what a run idles into three parts:
//
//   simulate(schedule, mean costs)   the schedule's own bubble at this machine's costs
//   replay_run(schedule, ran)        that, plus what the variation of each action's time
//                                    costs a list (a late action delays every rank that
//                                    waits on it)
//   measured                         that, plus the transport: message latency and the
//                                    executor's own work between computes
//
// The order as run differs from the list's only where the executor ran a W early, in place of
// a wait for a late input (parallel/pipeline_executor.h). The replay moves such a W to where it
// ran: after the sends that precede the compute it stood in for, which were posted, and before
// that compute's receives, which were not there yet.
#pragma once

#include <cstdint>
#include <vector>

#include "parallel/pipeline/schedule.h"
#include "parallel/pipeline/schedule_simulator.h"
#include "parallel/pipeline/value_or_refusal.h"

namespace titan::parallel::pipeline {

// One compute as a rank ran it: its index in the rank's list and its time, waits excluded, in
// the unit the simulation is to count (the trainer uses microseconds).
struct RanCompute {
  int64_t index = 0;
  int64_t cost = 0;
};

// Each rank's list with its computes in the order `ran` gives ([pp], every compute of the list
// once), sends and receives placed as above; or one line naming the first compute out of place.
ValueOrRefusal<PipelineSchedule> as_run(const PipelineSchedule& schedule,
                                        const std::vector<std::vector<RanCompute>>& ran);

// The simulation of that list with each compute at its own cost.
ValueOrRefusal<Simulation> replay_run(const PipelineSchedule& schedule,
                                      const std::vector<std::vector<RanCompute>>& ran);

// Several runs of the schedule ([run][pp]), each replayed, as one bubble: the ranks' idle time
// summed over the runs / (pp × the runs' makespans summed), as a run's measured bubble sums its
// steps (pipeline::measured_bubble).
ValueOrRefusal<double> replayed_bubble(
    const PipelineSchedule& schedule,
    const std::vector<std::vector<std::vector<RanCompute>>>& runs);

}  // namespace titan::parallel::pipeline
