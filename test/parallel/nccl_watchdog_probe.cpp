// The NCCL backend failing on purpose, for test_nccl_watchdog. Mostly it makes the watchdog
// fire: it posts an NCCL operation that can never complete, with a short
// parallelism.comm_timeout_s, and waits for the job to be aborted.
//
//   nccl_watchdog_probe recv TIMEOUT_S     4 ranks, mesh dp_shard 2 × tp 2: rank 0 receives on
//                                          dp_shard from its peer, which never sends (it waits
//                                          in an MPI barrier). Two dims of degree 2, so that
//                                          the group is named dp_shard, not world
//   nccl_watchdog_probe stalled TIMEOUT_S  any ranks: an all_reduce on tp queued behind a
//                                          compute stream held by a host function that never
//                                          returns
//   nccl_watchdog_probe pp_recv TIMEOUT_S  2 ranks, mesh pp 2: rank 0 receives an activation
//                                          from pp rank 1, which never sends: the receive is on
//                                          a pipeline peer channel (comm/peer_channels.h), a
//                                          communicator and a stream of its own
//
// The watchdog ends the job (exit code 1 via MPI_Abort). Exit codes of its own: 77 without a
// CUDA device, 3 when the job was still running long after the timeout, 2 for bad arguments.
#include <cuda_runtime_api.h>
#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <thread>

#include "core/check.h"
#include "core/cuda/stream.h"
#include "core/tensor.h"
#include "gpu_rank.h"
#include "parallel/comm/peer_channels.h"
#include "parallel/device_mesh.h"
#include "parallel/mpi_runtime.h"
#include "parallel/parallel_dims.h"

namespace {

using namespace titan;
using namespace titan::parallel;

void block_forever(void*) {
  for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
}

// Rank 0 receives what its dp_shard peer never sends; the host waits for it with a copy to the
// host.
void unmatched_recv(const DeviceMesh& mesh) {
  if (mesh.rank() == 0) {
    Tensor got = Tensor::zeros({4}, DType::F32, Device::cuda(cuda::current_device()));
    mesh[MeshDim::DpShard].comm().recv(got, 1);
    got.to(Device::cpu());
  } else {
    MPI_Barrier(MPI_COMM_WORLD);  // rank 0 never comes
  }
}

// Rank 0 receives an activation that pp rank 1 never sends, as the pipeline executor receives
// one (on the activations channel); the host waits for it with a copy to the host.
void unmatched_pipeline_recv(const DeviceMesh& mesh) {
  if (mesh.rank() == 0) {
    Tensor got = Tensor::zeros({4}, DType::F32, Device::cuda(cuda::current_device()));
    mesh[MeshDim::Pp].comm().recv_async(got, 1, kActivationChannel).wait();
    got.to(Device::cpu());
  } else {
    MPI_Barrier(MPI_COMM_WORLD);  // rank 0 never comes
  }
}

// The compute stream stops at a host function; the all_reduce waits for it on the
// communication stream, so it never starts.
void stalled_stream(const DeviceMesh& mesh) {
  Tensor t = Tensor::zeros({4}, DType::F32, Device::cuda(cuda::current_device()));
  cudaLaunchHostFunc(cuda::current_stream(), block_forever, nullptr);
  mesh[MeshDim::Tp].comm().all_reduce(t, ReduceOp::Sum);
  cudaStreamSynchronize(cuda::current_stream());
}

}  // namespace

int main(int argc, char** argv) {
  const std::string scenario = argc == 3 ? argv[1] : "";
  if (scenario != "recv" && scenario != "stalled" && scenario != "pp_recv") {
    std::fprintf(stderr, "usage: nccl_watchdog_probe recv|stalled|pp_recv TIMEOUT_S\n");
    return 2;
  }
  const double timeout_s = std::atof(argv[2]);
  titan::testing::prepare_gpu_rank();
  try {
    MpiRuntime mpi(&argc, &argv);
    const int world = mpi.world_size(), rank = mpi.world_rank();
    const int needed = scenario == "recv" ? 4 : scenario == "pp_recv" ? 2 : world;
    if (world != needed) {
      if (rank == 0) {
        std::fprintf(stderr, "nccl_watchdog_probe %s needs %d ranks\n", scenario.c_str(), needed);
      }
      return 2;
    }
    MeshDegrees degrees;
    degrees.pp = scenario == "pp_recv" ? 2 : 1;
    degrees.tp = scenario == "recv" ? 2 : 1;
    degrees.dp_shard = world / (degrees.pp * degrees.tp);
    const DeviceMesh mesh = DeviceMesh::root(ParallelDims::resolve(degrees, world), rank,
                                             CommOptions{CommBackend::Nccl, timeout_s});
    std::fprintf(stderr, "nccl_watchdog_probe: rank %d posts its operation\n", rank);
    if (scenario == "recv") {
      unmatched_recv(mesh);
    } else if (scenario == "pp_recv") {
      unmatched_pipeline_recv(mesh);
    } else {
      stalled_stream(mesh);
    }
  } catch (const InputError& e) {
    std::fprintf(stderr, "nccl_watchdog_probe: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    // After ncclCommAbort the waits above may fail: the watchdog is ending the job.
    std::fprintf(stderr, "nccl_watchdog_probe: %s\n", e.what());
  }
  std::this_thread::sleep_for(std::chrono::duration<double>(timeout_s + 30));
  std::fprintf(stderr, "nccl_watchdog_probe: the job was still running %g s after the timeout\n",
               timeout_s + 30);
  return 3;
}
