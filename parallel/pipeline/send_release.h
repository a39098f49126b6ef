// When a sent boundary tensor leaves its sender, by the simulator's clock: the memory plan's
// model of a transport that frees a sent tensor once its transfer is done (NCCL on CUDA, where
// the watchdog hands it back to the allocator when the send's end event has passed), as
// against MPI, whose sends the executor holds to the end of its list.
//
// The executor posts a send right after the compute that made its tensor, and a receive when the
// compute before the one that reads it starts (parallel/pipeline_executor.h). The transfer can
// finish once both are posted; messages are free in the simulation (schedule_simulator.h), but
// a real one takes time and overlaps what the sender computes next, so the tensor is taken to
// stay until the first compute of the sender's list that starts strictly after both posts.
#pragma once

#include <cstdint>
#include <vector>

#include "parallel/pipeline/schedule.h"
#include "parallel/pipeline/schedule_simulator.h"

namespace titan::parallel::pipeline {

// [pp][index in the rank's list]: for a send, the index of the compute before which its tensor
// is gone, or the list's size when it stays to the end; -1 for every other action. `simulation`
// is `schedule`'s (simulate()), at whatever costs.
std::vector<std::vector<int64_t>> send_release_points(const PipelineSchedule& schedule,
                                                      const Simulation& simulation);

}  // namespace titan::parallel::pipeline
