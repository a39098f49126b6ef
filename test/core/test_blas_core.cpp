// core/blas_core.h: the OpenBLAS core is changed only where OpenBLAS fell back to generic
// kernels on a CPU that can run better ones, and never against a user's OPENBLAS_CORETYPE.
#include <doctest/doctest.h>

#include <cstdlib>
#include <string>

#include "core/blas_core.h"

using titan::better_blas_core;
using titan::CpuVectorFeatures;

TEST_SUITE("fast") {
  TEST_CASE("OpenBLAS core: a generic fallback is replaced by what the CPU supports") {
    const CpuVectorFeatures avx512{true, true, true}, avx2{true, true, false}, avx{true, false, false},
        sse{};
    CHECK(better_blas_core("Prescott", avx512) == "SkylakeX");
    CHECK(better_blas_core("Prescott", avx2) == "Haswell");
    CHECK(better_blas_core("Nehalem", avx) == "Sandybridge");
    CHECK(better_blas_core("Core2", avx512) == "SkylakeX");
    CHECK(better_blas_core("Prescott", sse).empty());  // nothing better to run
    // OpenBLAS's own choices stand, even where the features would allow more.
    CHECK(better_blas_core("Zen", avx512).empty());
    CHECK(better_blas_core("Haswell", avx512).empty());
    CHECK(better_blas_core("SkylakeX", avx512).empty());
    CHECK(better_blas_core("Cooperlake", avx512).empty());
    CHECK(better_blas_core("Sandybridge", avx2).empty());
  }

  TEST_CASE("OpenBLAS core: this process runs what its CPU supports or what the user asked") {
    const std::string core = titan::blas_core_name();
    MESSAGE("OpenBLAS core ", core, "; ", titan::blas_core_note());
    CHECK_FALSE(core.empty());
    if (std::getenv("OPENBLAS_CORETYPE") == nullptr) {
      // Nothing was chosen for this process: OpenBLAS's own choice is not a fallback this CPU
      // could beat (else use_best_blas_core would have re-executed it on a better core).
      CHECK(better_blas_core(core, titan::cpu_vector_features()).empty());
      CHECK(titan::blas_core_note().empty());
    }
  }
}
