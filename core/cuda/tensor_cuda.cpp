// Tensor copies and memsets on CUDA: core/cuda/backend.h's copy and zero (and its device and
// stream helpers).
#include <cuda_runtime_api.h>

#include "core/cuda/backend.h"
#include "core/cuda/caching_allocator.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/stream.h"

namespace titan::cuda_backend {

Allocator* allocator() { return &cuda::caching_allocator(); }
int64_t allocator_cached_bytes() { return cuda::cache_stats().cached_bytes; }

void set_device(int index) { cuda::set_device(index); }
void synchronize() { cuda::synchronize_stream(); }

void copy(const Tensor& dst, const Tensor& src) {
  TT_CHECK(dst.is_contiguous(), "copy_from into a non-contiguous tensor ", dst);
  if (dst.numel() == 0) return;
  cudaStream_t stream = cuda::current_stream();
  size_t elem = dtype_size(dst.dtype());
  if (src.is_contiguous()) {
    TT_CUDA_CHECK(
        cudaMemcpyAsync(dst.raw_data(), src.raw_data(), dst.nbytes(), cudaMemcpyDefault, stream));
  } else {
    // A column block of a 2-D buffer (rows strided, elements contiguous): one 2-D copy.
    TT_CHECK(src.ndim() == 2 && src.strides()[1] == 1, "copy between devices of a strided ", src,
             " (strides ", src.strides(), "): only row-strided 2-D views are supported");
    size_t row_bytes = static_cast<size_t>(src.size(1)) * elem;
    TT_CUDA_CHECK(cudaMemcpy2DAsync(dst.raw_data(), row_bytes, src.raw_data(),
                                    static_cast<size_t>(src.strides()[0]) * elem, row_bytes,
                                    static_cast<size_t>(src.size(0)), cudaMemcpyDefault, stream));
  }
  // The host reads (or may free) its side as soon as copy_from returns.
  if (dst.device().is_cpu() || src.device().is_cpu()) TT_CUDA_CHECK(cudaStreamSynchronize(stream));
}

void zero(const Tensor& t) {
  TT_CHECK(t.is_contiguous(), "zero_ of a non-contiguous tensor ", t);
  TT_CUDA_CHECK(cudaMemsetAsync(t.raw_data(), 0, t.nbytes(), cuda::current_stream()));
}

}  // namespace titan::cuda_backend
