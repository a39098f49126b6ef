// The one kernel the cuDNN attention backend needs of its own: cuDNN writes its outputs in
// bf16, and the block ops keep their partials and gradient sums in f32 views of larger buffers.
#include <cuda_bf16.h>

#include <climits>

#include "core/cuda/launch.cuh"
#include "core/cuda/stream.h"
#include "model/ops/attention/attention_cudnn.h"

namespace titan::model {

namespace {

// dst[b, r, c] (=|+=) src[b, r, c], c fastest; one thread an element, grid-stride.
template <class Src>
__global__ void cudnn_to_f32_kernel(float* dst, int64_t dst_sb, int64_t dst_sr, const Src* src,
                                    int64_t src_sb, int64_t src_sr, int64_t rows, int64_t cols,
                                    int64_t n, bool accumulate) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t c = i % cols, r = i / cols % rows, b = i / cols / rows;
    const float v = cuda::load_f32(src[b * src_sb + r * src_sr + c]);
    float& d = dst[b * dst_sb + r * dst_sr + c];
    d = accumulate ? d + v : v;
  }
}

}  // namespace

void attention_cudnn_to_f32(const Tensor& dst, const Tensor& src, bool accumulate) {
  TT_CHECK(dst.ndim() == 3 && dst.shape() == src.shape() && dst.dtype() == DType::F32 &&
               dst.strides()[2] == 1 && src.strides()[2] == 1,
           "attention_cudnn_to_f32: dst must be an f32 [B, R, N] view of src's shape, both with a "
           "contiguous last dim, got ",
           dst, " and ", src);
  const int64_t n = dst.numel();
  if (n == 0) return;
  constexpr int kThreads = 256;
  float* d = cuda::device_ptr<float>(dst);
  cuda::visit_cuda_floating(src.dtype(), "attention_cudnn_to_f32", [&]<class T>() {
    cudnn_to_f32_kernel<T>
        <<<cuda::grid_for(n, kThreads, INT32_MAX), kThreads, 0, cuda::current_stream()>>>(
            d, dst.strides()[0], dst.strides()[1], cuda::device_ptr<T>(src), src.strides()[0],
            src.strides()[1], dst.size(1), dst.size(2), n, accumulate);
    cuda::launch_check();
  });
}

}  // namespace titan::model
