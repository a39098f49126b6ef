// GPU tests: each one starts with SKIP_WITHOUT_CUDA_DEVICE(). Without a usable device the test
// prints one line saying why and exits with code 77, which ctest reports as "Skipped" (the gpu
// test executable sets SKIP_RETURN_CODE 77): never a silent pass.
#pragma once

#include <cstdio>
#include <cstdlib>

#include "core/cuda/device_query.h"

#define SKIP_WITHOUT_CUDA_DEVICE()                                                  \
  do {                                                                              \
    ::titan::CudaQuery tt_query = ::titan::query_cuda_devices();                    \
    if (tt_query.devices.empty()) {                                                 \
      std::printf("SKIPPED: no CUDA device: %s\n", tt_query.why_none.c_str());      \
      std::fflush(stdout);                                                          \
      std::_Exit(77);                                                               \
    }                                                                               \
  } while (0)
