// The OpenBLAS kernels this process runs, chosen before the library has run anything.
//
// Debian 12's OpenBLAS (0.3.21, built with DYNAMIC_ARCH) picks its kernels when it loads, from
// its own tables of CPU models; on a CPU newer than it knows it falls back to the generic
// Prescott kernels (SSE3), whatever the CPU can do: on a 2-core Xeon with AVX-512 a 2048³ SGEMM
// runs at 29–34 GFLOP/s that way against 204 with OPENBLAS_CORETYPE=SkylakeX. OPENBLAS_CORETYPE
// is read only while the library loads, before main().
//
// So an executable calls use_best_blas_core(argv) first thing in main(): when OpenBLAS runs a
// generic core (no AVX kernels), the user has not set OPENBLAS_CORETYPE, and the CPU has the
// features of a better core (AVX-512 F/BW/DQ/VL: SkylakeX; AVX2 and FMA: Haswell; AVX:
// Sandybridge), it sets OPENBLAS_CORETYPE and re-executes itself, once, with the same arguments
// and environment; blas_core_note() then says so, for the executable's log. A choice OpenBLAS
// made itself (Zen on an AMD EPYC, SkylakeX on a Xeon it knows) and a user's OPENBLAS_CORETYPE
// are never changed.
//
// Re-executing rather than loading OpenBLAS by hand after choosing: only the loaded library can
// say which core it picked (its CPU tables are its own), so the choice is overridden exactly
// when it fell back; and every binary, test, fuzz target and sanitized tree keeps linking
// OpenBLAS the ordinary way. It costs one more exec of the binary before MPI starts, and is not
// done under valgrind (whose execve would leave the tool behind).
#pragma once

#include <string>
#include <string_view>

namespace titan {

// What the CPU offers OpenBLAS's x86 kernels (the OS has enabled the registers, as
// __builtin_cpu_supports checks).
struct CpuVectorFeatures {
  bool avx = false;
  bool avx2_fma = false;      // AVX2 and FMA
  bool avx512_skylake = false;  // AVX-512 F, BW, DQ and VL
};
CpuVectorFeatures cpu_vector_features();

// The core to ask for instead of `current` (openblas_get_corename()) on a CPU with `features`,
// or empty when `current` is not a generic fallback or nothing better is supported.
std::string better_blas_core(std::string_view current, const CpuVectorFeatures& features);

// As above, re-executing the process when a better core applies (returns otherwise).
void use_best_blas_core(char** argv);

// One line for the log when this process runs on a core chosen by use_best_blas_core, else
// empty.
std::string blas_core_note();

// openblas_get_corename(): the kernels running now.
std::string blas_core_name();

}  // namespace titan
