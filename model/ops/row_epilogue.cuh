// The epilogue of model/'s row kernels (one block per row: RMSNorm's, and SwiGLU's row form):
// what a kernel does besides writing its row. Nothing, for the ops themselves; quantizing the
// row for the FP8 GEMM that reads it, for the fused producers of fp8/cuda/producer_quantize.cu,
// which pass their own epilogue type, so that model/ knows nothing of FP8 (decision 2) and the
// fused kernel runs the op's own arithmetic, thread for thread.
//
// value() sees every element a thread stores, as the f32 of its T; row_done() is called by
// every thread of the block once the row is stored (it may synchronise the block).
#pragma once

#include <algorithm>
#include <cstdint>

namespace titan::model {

struct NoEpilogue {
  __device__ __forceinline__ void value(float) {}
  template <class T>
  __device__ __forceinline__ void row_done(int64_t, const T*, int64_t) {}
};

// A launcher makes its kernel's epilogue for the element type T it visits: this one, none.
struct NoEpilogues {
  template <class T>
  NoEpilogue operator()() const {
    return {};
  }
};

// Threads of a row kernel: enough for one element or pack each, in whole warps, at most 512.
inline int row_threads(int64_t units) {
  constexpr int64_t kMaxRowThreads = 512;
  const int64_t warps = (units + 31) / 32;
  return static_cast<int>(std::clamp<int64_t>(warps * 32, 32, kMaxRowThreads));
}

}  // namespace titan::model
