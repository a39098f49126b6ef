// doctest main for GPU tests that run on every rank of an mpirun job (test_comm_gpu): skips
// without a device, picks this rank's GPU (several ranks may share one), then runs as
// test_parallel does, with every CUDA path not yet run on a GPU allowed.
#include "core/unverified_gpu_paths.h"
#include "gpu_rank.h"
#include "mpi_doctest.h"

int main(int argc, char** argv) {
  titan::testing::prepare_gpu_rank();
  titan::allow_every_unverified_gpu_path();
  return titan::testing::run_doctest_on_every_rank(argc, argv);
}
