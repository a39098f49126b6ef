// TT_CUDA_CHECK(call): throws titan::Error naming the call, the CUDA error and the file:line.
// For .cu and .cpp files alike (no fmt, no spdlog).
#pragma once

#include <cuda_runtime_api.h>

#include "core/check.h"

#define TT_CUDA_CHECK(call)                                                                     \
  do {                                                                                          \
    cudaError_t tt_cuda_status = (call);                                                        \
    if (tt_cuda_status != cudaSuccess) [[unlikely]]                                             \
      ::titan::detail::check_failed(                                                            \
          #call, ::titan::detail::concat("CUDA error ", cudaGetErrorName(tt_cuda_status), ": ", \
                                         cudaGetErrorString(tt_cuda_status)));                  \
  } while (0)
