#include "gpu_rank.h"

#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/cuda/device_query.h"
#include "core/cuda/stream.h"

namespace titan::testing {

namespace {

// Open MPI's description of this process (0, or 1 for the sizes, without mpirun).
int launcher_value(const char* name, int fallback) {
  const char* text = std::getenv(name);
  return text != nullptr ? std::atoi(text) : fallback;
}

}  // namespace

void prepare_gpu_rank() {
  const int world_rank = launcher_value("OMPI_COMM_WORLD_RANK", 0);
  const int local_rank = launcher_value("OMPI_COMM_WORLD_LOCAL_RANK", 0);
  const int local_size = launcher_value("OMPI_COMM_WORLD_LOCAL_SIZE", 1);
  const CudaQuery query = query_cuda_devices();
  if (query.devices.empty()) {
    if (world_rank == 0) std::printf("SKIPPED: no CUDA device: %s\n", query.why_none.c_str());
    std::fflush(stdout);
    std::_Exit(77);
  }
  const int devices = static_cast<int>(query.devices.size());
  cuda::set_device(query.devices[local_rank % devices].index);
  if (local_size > devices) {
    const std::string host = "titan-test-rank-" + std::to_string(world_rank);
    setenv("NCCL_HOSTID", host.c_str(), 0);
    setenv("NCCL_SOCKET_IFNAME", "lo", 0);
    setenv("NCCL_IB_DISABLE", "1", 0);
  }
}

}  // namespace titan::testing
