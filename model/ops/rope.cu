// CUDA twin of model/ops/rope.h.
//
// In place, a block per row (grid-stride over rows) and a thread per (head, pair) of the row.
// Consecutive threads take consecutive pairs, so a warp reads and writes one contiguous stretch
// of the row (coalesced) and the f32 tables [S, Dh/2] are read contiguously too. A pair is two
// scalar loads, not one vector: both hit the same sector, and views at any offset work.
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>

#include "core/cuda/launch.cuh"
#include "model/ops/rope.h"

namespace titan::model {

namespace {

struct RopeConfig {
  static constexpr int kMaxThreads = 256;
  static constexpr int64_t kMaxBlocks = 65535LL * 16;
};

// sign = +1 rotates by the angle (forward), -1 by its negative (backward: the transpose).
// Blocks stride over rows; a block's threads stride over the row's (head, pair) slots.
template <class T>
__global__ void rope_rotate_kernel(T* x, const float* cos, const float* sin, int64_t rows,
                                   int64_t row_stride, int64_t seq_len, int pairs_per_row, int half,
                                   float sign) {
  for (int64_t t = blockIdx.x; t < rows; t += gridDim.x) {
    const float* c_row = cos + (t % seq_len) * half;
    const float* s_row = sin + (t % seq_len) * half;
    T* row = x + t * row_stride;
    for (int j = threadIdx.x; j < pairs_per_row; j += blockDim.x) {
      const int h = j / half, i = j - h * half;
      const float c = c_row[i], s = sign * s_row[i];
      T* pair = row + static_cast<int64_t>(h) * 2 * half + 2 * i;
      const float x0 = cuda::load_f32(pair[0]), x1 = cuda::load_f32(pair[1]);
      pair[0] = cuda::store_as<T>(x0 * c - x1 * s);
      pair[1] = cuda::store_as<T>(x0 * s + x1 * c);
    }
  }
}

void rope_rotate(const char* op, const Tensor& x, const Tensor& cos, const Tensor& sin,
                 int64_t seq_len, int64_t n_heads, int64_t head_dim, float sign) {
  const int64_t rows = x.size(0), half = head_dim / 2, pairs_per_row = n_heads * half;
  if (rows == 0 || pairs_per_row == 0) return;
  TT_CHECK(pairs_per_row <= INT32_MAX, op, ": ", n_heads, " heads of ", head_dim,
           " are too many pairs for one row");
  const int threads = static_cast<int>(
      std::clamp<int64_t>((pairs_per_row + 31) / 32 * 32, 32, RopeConfig::kMaxThreads));
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>(rows, RopeConfig::kMaxBlocks));
  cuda::visit_cuda_floating(x.dtype(), op, [&]<class T>() {
    rope_rotate_kernel<T><<<blocks, threads, 0, cuda::current_stream()>>>(
        cuda::device_ptr<T>(x), cuda::device_ptr<float>(cos), cuda::device_ptr<float>(sin), rows,
        x.size(1), seq_len, static_cast<int>(pairs_per_row), static_cast<int>(half), sign);
    cuda::launch_check();
  });
}

}  // namespace

void rope_forward_cuda(const Tensor& x, const Tensor& cos, const Tensor& sin, int64_t seq_len,
                       int64_t n_heads, int64_t head_dim) {
  rope_rotate("rope_forward", x, cos, sin, seq_len, n_heads, head_dim, +1.0f);
}

void rope_backward_cuda(const Tensor& dx, const Tensor& cos, const Tensor& sin, int64_t seq_len,
                        int64_t n_heads, int64_t head_dim) {
  rope_rotate("rope_backward", dx, cos, sin, seq_len, n_heads, head_dim, -1.0f);
}

}  // namespace titan::model
