// A build without NCCL (TITAN_CUDA=OFF): the NCCL backend's factories say how to get one, and
// which backend works in this build.
#include "core/check.h"
#include "parallel/comm/nccl_communicator.h"

namespace titan::parallel {

namespace {
[[noreturn]] void no_nccl() {
  input_error(
      "parallelism.comm_backend: nccl, but this build has no CUDA/NCCL; use "
      "parallelism.comm_backend: mpi (or build with -DTITAN_CUDA=ON where nvcc and "
      "NCCL are installed)");
}
}  // namespace

std::shared_ptr<NcclWorld> create_nccl_world(double) { no_nccl(); }

std::shared_ptr<Communicator> split_nccl_communicator(const std::shared_ptr<NcclWorld>&, int, int,
                                                      std::shared_ptr<Communicator>) {
  no_nccl();
}

}  // namespace titan::parallel
