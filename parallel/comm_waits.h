// What one kind of transfer (tensor parallelism's, context parallelism's) cost this rank's
// compute, and what shows that the transfers ran during it: tp_wait_ms and cp_wait_ms.
//
// The group that waits (TensorParallelGroup, ContextParallelGroup) counts into the CommWaits it
// was given; whoever runs the steps holds the same object and takes the figures after each step
// (app/train_step.h), so the clock belongs to one run and one group, not to the process: two
// meshes in one process, or two tests, never mix their waits.
#pragma once

#include <cstdint>

#include "core/wait_clock.h"

namespace titan::parallel {

// The figures since the last take.
struct CommStats {
  // Seconds the compute stood waiting for transfers: the part not hidden behind it. On the CPU
  // the host's blocked time; on CUDA the time the compute stream stood still at the waits, timed
  // by events on it (core/wait_clock.h: with NCCL a wait only orders streams and returns at once).
  double wait_seconds = 0;
  int64_t transfers = 0;                // posted transfers waited for
  int64_t finished_during_compute = 0;  // of them, found complete between compute slices
  int64_t blocks = 0;                   // cp: chunk×chunk blocks of scores computed
};

class CommWaits {
 public:
  WaitClock& clock() { return clock_; }
  void count_transfer() { ++counts_.transfers; }
  void count_finished_during_compute() { ++counts_.finished_during_compute; }
  void count_blocks(int64_t n) { counts_.blocks += n; }

  // The figures since the last take, and forgets them. Never blocks: on CUDA a wait whose events
  // have not run yet stays for the next take (synchronize first to read every wait).
  CommStats take() {
    CommStats taken = counts_;
    taken.wait_seconds = clock_.take_seconds();
    counts_ = {};
    return taken;
  }

 private:
  WaitClock clock_;
  CommStats counts_;
};

}  // namespace titan::parallel
