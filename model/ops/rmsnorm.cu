// CUDA twin of model/ops/rmsnorm.h. The row kernels (forward, and the dx part of backward)
// are in rmsnorm_rows.cuh, shared with the fused RMSNorm + FP8 quantize of fp8/.
//
// dweight is a column sum over rows, a different reduction shape, so it is its own kernel: a
// warp spans 32 columns (coalesced), the warps of a block and a grid dimension split the rows,
// and when the grid splits the rows each split writes an f32 partial that a last kernel adds to
// dweight in a fixed order. No atomics: the gradient is the same bits on every run.
#include <algorithm>
#include <cstdint>

#include "core/cuda/launch.cuh"
#include "model/ops/rmsnorm.h"
#include "model/ops/rmsnorm_rows.cuh"

namespace titan::model::rmsnorm_rows {

namespace {

struct DweightConfig {
  static constexpr int kColumns = 32;          // columns per block (one warp wide)
  static constexpr int kRowGroups = 16;        // warps per block, each taking every 16th row
  static constexpr int kTargetBlocks = 528;    // ~4 blocks per H100 SM
  static constexpr int kMinRowsPerThread = 4;  // a split is not worth fewer
};

// Σ over this block's rows of dy ⊙ x̂ for 32 columns. blockDim = (kColumns, kRowGroups);
// blockIdx.y picks a split of the rows. With one split the sum goes straight into dweight,
// otherwise into partials[blockIdx.y, :].
template <class T>
__global__ void rmsnorm_dweight_kernel(float* dweight, float* partials, const T* dy, const T* x,
                                       const float* rstd, int64_t rows, int64_t dim) {
  constexpr int kColumns = DweightConfig::kColumns, kRowGroups = DweightConfig::kRowGroups;
  __shared__ float group_sums[kRowGroups][kColumns + 1];  // +1: no bank conflicts
  const int64_t d = blockIdx.x * int64_t{kColumns} + threadIdx.x;
  float sum = 0;
  if (d < dim) {
    const int64_t stride = int64_t{kRowGroups} * gridDim.y;
    for (int64_t t = blockIdx.y * int64_t{kRowGroups} + threadIdx.y; t < rows; t += stride) {
      sum += cuda::load_f32(dy[t * dim + d]) * (cuda::load_f32(x[t * dim + d]) * rstd[t]);
    }
  }
  group_sums[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.y != 0 || d >= dim) return;
  sum = 0;
#pragma unroll
  for (int g = 0; g < kRowGroups; ++g) sum += group_sums[g][threadIdx.x];
  if (gridDim.y == 1) {
    dweight[d] += sum;
  } else {
    partials[blockIdx.y * dim + d] = sum;
  }
}

// dweight[d] += Σ_s partials[s, d], in order of s.
__global__ void rmsnorm_dweight_finish_kernel(float* dweight, const float* partials, int splits,
                                              int64_t dim) {
  for (int64_t d = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; d < dim;
       d += int64_t{gridDim.x} * blockDim.x) {
    float sum = 0;
    for (int s = 0; s < splits; ++s) sum += partials[s * dim + d];
    dweight[d] += sum;
  }
}

}  // namespace

void rmsnorm_dweight_cuda(const Tensor& dweight, const Tensor& dy, const Tensor& x,
                          const Tensor& rstd) {
  const int64_t rows = x.size(0), dim = x.size(1);
  if (rows == 0 || dim == 0) return;
  using Config = DweightConfig;
  const int64_t column_blocks = (dim + Config::kColumns - 1) / Config::kColumns;
  const int64_t max_splits =
      std::max<int64_t>(1, rows / (int64_t{Config::kRowGroups} * Config::kMinRowsPerThread));
  const int64_t splits = std::clamp<int64_t>(Config::kTargetBlocks / column_blocks, 1,
                                             std::min<int64_t>(max_splits, 65535));
  Tensor partials;
  if (splits > 1) partials = Tensor::empty({splits, dim}, DType::F32, dweight.device());
  float* partials_ptr = splits > 1 ? cuda::device_ptr<float>(partials) : nullptr;
  float* dweight_ptr = cuda::device_ptr<float>(dweight);
  const dim3 grid(static_cast<unsigned>(column_blocks), static_cast<unsigned>(splits));
  const dim3 block(Config::kColumns, Config::kRowGroups);
  cuda::visit_cuda_floating(x.dtype(), "rmsnorm_backward", [&]<class T>() {
    rmsnorm_dweight_kernel<T><<<grid, block, 0, cuda::current_stream()>>>(
        dweight_ptr, partials_ptr, cuda::device_ptr<T>(dy), cuda::device_ptr<T>(x),
        cuda::device_ptr<float>(rstd), rows, dim);
    cuda::launch_check();
  });
  if (splits > 1) {
    constexpr int kThreads = 256;
    rmsnorm_dweight_finish_kernel<<<cuda::grid_for(dim, kThreads), kThreads, 0,
                                    cuda::current_stream()>>>(dweight_ptr, partials_ptr,
                                                              static_cast<int>(splits), dim);
    cuda::launch_check();
  }
}

}  // namespace titan::model::rmsnorm_rows

namespace titan::model {

namespace {

constexpr NoEpilogues kNoEpilogue;

void launch_rmsnorm_backward(const Tensor& dx, const Tensor& dweight, const Tensor& dy,
                             const Tensor& x, const Tensor& weight, const Tensor& rstd,
                             const Tensor* dresidual) {
  rmsnorm_rows::launch_backward_dx_rows(dx, dy, x, weight, rstd, dresidual, kNoEpilogue);
  rmsnorm_rows::rmsnorm_dweight_cuda(dweight, dy, x, rstd);
}

}  // namespace

void rmsnorm_forward_cuda(const Tensor& y, const Tensor& rstd, const Tensor& x,
                          const Tensor& weight, double eps) {
  rmsnorm_rows::launch_forward_rows(y, rstd, x, nullptr, weight, eps, kNoEpilogue);
}

void add_rmsnorm_forward_cuda(const Tensor& y, const Tensor& rstd, const Tensor& h,
                              const Tensor& residual, const Tensor& weight, double eps) {
  rmsnorm_rows::launch_forward_rows(y, rstd, h, &residual, weight, eps, kNoEpilogue);
}

void rmsnorm_backward_cuda(const Tensor& dx, const Tensor& dweight, const Tensor& dy,
                           const Tensor& x, const Tensor& weight, const Tensor& rstd) {
  launch_rmsnorm_backward(dx, dweight, dy, x, weight, rstd, nullptr);
}

void rmsnorm_backward_add_cuda(const Tensor& dx, const Tensor& dweight, const Tensor& dy,
                               const Tensor& x, const Tensor& weight, const Tensor& rstd,
                               const Tensor& dresidual) {
  launch_rmsnorm_backward(dx, dweight, dy, x, weight, rstd, &dresidual);
}

}  // namespace titan::model
