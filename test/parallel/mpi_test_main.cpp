// doctest main for tests that run on every rank of an mpirun job (test_parallel), after the
// OpenBLAS core is chosen as the executables choose it (core/blas_core.h), with every CUDA path
// not yet run on a GPU allowed, as in test/support/test_main.cpp.
#include "core/blas_core.h"
#include "core/unverified_gpu_paths.h"
#include "mpi_doctest.h"

int main(int argc, char** argv) {
  titan::use_best_blas_core(argv);
  titan::allow_every_unverified_gpu_path();
  return titan::testing::run_doctest_on_every_rank(argc, argv);
}
