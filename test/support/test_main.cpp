// The tests' main: doctest's, after the OpenBLAS core is chosen as the executables choose it
// (core/blas_core.h), so that the tests' GEMMs run on the kernels the product's do, and with
// every CUDA path not yet run on a GPU allowed (core/unverified_gpu_paths.h), so that the gpu
// tests run them; a test of a default path allows none for its own span.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include "core/blas_core.h"
#include "core/unverified_gpu_paths.h"

int main(int argc, char** argv) {
  titan::use_best_blas_core(argv);
  titan::allow_every_unverified_gpu_path();
  return doctest::Context(argc, argv).run();
}
