// The process state titan_train sets before its mesh exists, kept apart from the checks that
// only read the config (trainer_checks.h), so that checking a config never changes the process:
// the communication timeout that watches set-up's own agreements between ranks, and this rank's
// device — the CPU, or its GPU (parallel/process_setup.h chooses it), made current. The GEMM
// threads and MPI are main's, through the same parallel/process_setup.h titan_generate uses.
#pragma once

#include "app/config.h"
#include "core/device.h"
#include "parallel/process_setup.h"

namespace titan::app {

// This rank's device, and when it is a GPU, which one and how many ranks share it.
struct RankDevice {
  Device device = Device::cpu();
  parallel::GpuPlacement gpu;  // when device is a GPU
};

// Sets the communication timeout (parallelism.comm_timeout_s) and, for training.device cuda,
// chooses this rank's GPU among its node's and makes it current. InputError naming
// training.device when no GPU is usable or the one named is not there.
RankDevice set_up_rank(const JobConfig& config, int local_rank, int local_size);

}  // namespace titan::app
