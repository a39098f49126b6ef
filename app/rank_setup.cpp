#include "app/rank_setup.h"

#include "core/cuda/backend.h"
#include "parallel/comm/mpi_watchdog.h"

namespace titan::app {

RankDevice set_up_rank(const JobConfig& config, int local_rank, int local_size) {
  // Set-up's own agreements between ranks are watched with the job's timeout too.
  parallel::set_comm_timeout(config.parallelism.comm_timeout_s);
  RankDevice rank;
  if (!config.training.device.is_cuda()) return rank;
  rank.gpu =
      parallel::choose_gpu(config.training.device, local_rank, local_size, "training.device");
  rank.device = Device::cuda(rank.gpu.info.index);
  cuda_backend::set_device(rank.device.index);
  return rank;
}

}  // namespace titan::app
