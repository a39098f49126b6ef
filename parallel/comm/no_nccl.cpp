// A build without NCCL (TITAN_CUDA=OFF): the NCCL backend's factories say how to get one, and
// which backend works in this build.
#include "core/check.h"
#include "parallel/comm/nccl_communicator.h"

namespace titan::parallel {

std::shared_ptr<NcclWorld> create_nccl_world(double, const std::string& backend_key) {
  input_error(backend_key, ": nccl, but this build has no CUDA/NCCL; use ", backend_key,
              ": mpi (or build with -DTITAN_CUDA=ON where nvcc and NCCL are installed)");
}

// Never reached: there is no world to split without create_nccl_world.
std::shared_ptr<Communicator> split_nccl_communicator(const std::shared_ptr<NcclWorld>&, int, int,
                                                      std::shared_ptr<Communicator>) {
  throw Error("split_nccl_communicator: this build has no NCCL");
}

std::shared_ptr<Communicator> split_nccl_peer_channel(const std::shared_ptr<NcclWorld>&, int, int,
                                                      int, std::shared_ptr<Communicator>) {
  throw Error("split_nccl_peer_channel: this build has no NCCL");
}

}  // namespace titan::parallel
