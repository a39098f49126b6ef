// The tests' main: doctest's, after the OpenBLAS core is chosen as the executables choose it
// (core/blas_core.h), so that the tests' GEMMs run on the kernels the product's do.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include "core/blas_core.h"

int main(int argc, char** argv) {
  titan::use_best_blas_core(argv);
  return doctest::Context(argc, argv).run();
}
