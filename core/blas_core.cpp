#include "core/blas_core.h"

#include <cblas.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include "core/check.h"

namespace titan {

namespace {

// Set in the re-executed process: the core OpenBLAS had fallen back to.
constexpr const char kFellBackFrom[] = "TITAN_OPENBLAS_FELL_BACK_FROM";

// OpenBLAS's x86-64 cores with AVX kernels or better, by the level of the features they use.
int core_level(std::string_view core) {
  for (std::string_view c : {"SkylakeX", "Cooperlake", "SapphireRapids"}) {
    if (core == c) return 3;
  }
  for (std::string_view c : {"Haswell", "Zen", "Excavator"}) {
    if (core == c) return 2;
  }
  for (std::string_view c : {"Sandybridge", "Bulldozer", "Piledriver", "Steamroller"}) {
    if (core == c) return 1;
  }
  return 0;  // Prescott, Core2, Penryn, Nehalem, Atom, Barcelona, …: generic SSE kernels
}

// What kFellBackFrom said when this process started (it is not passed on to child processes,
// which did not choose).
std::string& fell_back_from() {
  static std::string from;
  return from;
}

bool under_valgrind() {
  const char* preload = std::getenv("LD_PRELOAD");
  return preload != nullptr && std::strstr(preload, "vgpreload") != nullptr;
}

}  // namespace

CpuVectorFeatures cpu_vector_features() {
  CpuVectorFeatures f;
#if defined(__x86_64__)
  __builtin_cpu_init();
  f.avx = __builtin_cpu_supports("avx");
  f.avx2_fma = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  f.avx512_skylake = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                     __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
#endif
  return f;
}

std::string better_blas_core(std::string_view current, const CpuVectorFeatures& features) {
  if (core_level(current) > 0) return {};
  if (features.avx512_skylake) return "SkylakeX";
  if (features.avx2_fma) return "Haswell";
  if (features.avx) return "Sandybridge";
  return {};
}

std::string blas_core_name() {
  const char* name = openblas_get_corename();
  return name == nullptr ? std::string("unknown") : std::string(name);
}

void use_best_blas_core(char** argv) {
  if (const char* from = std::getenv(kFellBackFrom); from != nullptr) {
    fell_back_from() = from;
    unsetenv(kFellBackFrom);
  }
#if defined(__x86_64__)
  if (std::getenv("OPENBLAS_CORETYPE") != nullptr || under_valgrind()) return;
  const std::string current = blas_core_name();
  const std::string better = better_blas_core(current, cpu_vector_features());
  if (better.empty()) return;
  if (setenv("OPENBLAS_CORETYPE", better.c_str(), 1) != 0 ||
      setenv(kFellBackFrom, current.c_str(), 1) != 0) {
    return;
  }
  execv("/proc/self/exe", argv);
  // Not re-executed (no /proc?): run on as we are, and say nothing was changed.
  unsetenv("OPENBLAS_CORETYPE");
  unsetenv(kFellBackFrom);
#else
  (void)argv;
#endif
}

std::string blas_core_note() {
  if (fell_back_from().empty()) return {};
  return detail::concat("OpenBLAS ", blas_core_name(), " kernels (it had fallen back to its generic ",
                        fell_back_from(), " kernels on this CPU, which it does not know; set OPENBLAS_CORETYPE "
                        "to choose yourself)");
}

}  // namespace titan
