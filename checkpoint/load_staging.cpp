#include "checkpoint/load_staging.h"

#if defined(TITAN_CUDA)
#include <cuda_runtime_api.h>
#include <spdlog/spdlog.h>
#endif

#include "core/cast.h"
#include "core/check.h"

namespace titan::checkpoint {

HostStaging::~HostStaging() { unpin(); }

Tensor HostStaging::take(const Shape& shape, DType dtype, bool pin) {
  const int64_t numel = shape.numel();
  if (!buffer_.defined() || buffer_.dtype() != dtype || buffer_.numel() < numel) {
    unpin();
    buffer_ = Tensor::empty({std::max<int64_t>(numel, 1)}, dtype);
  }
#if defined(TITAN_CUDA)
  if (pin && pinned_ == nullptr) {
    if (cudaHostRegister(buffer_.raw_data(), buffer_.nbytes(), cudaHostRegisterDefault) ==
        cudaSuccess) {
      pinned_ = buffer_.raw_data();
    } else {
      (void)cudaGetLastError();
      spdlog::warn("load: cannot pin {} bytes of staging memory; copies to the GPU go unpinned",
                   buffer_.nbytes());
    }
  }
#else
  (void)pin;  // nothing to pin without a GPU
#endif
  return buffer_.narrow(0, 0, numel).view(shape);
}

void HostStaging::unpin() {
#if defined(TITAN_CUDA)
  if (pinned_ != nullptr) cudaHostUnregister(pinned_);
#endif
  pinned_ = nullptr;
}

void move_into(const Tensor& local, const Tensor& staged) {
  TT_CHECK(staged.device().is_cpu() && staged.is_contiguous() && staged.shape() == local.shape(),
           "move_into: ", staged, " into ", local);
  if (local.dtype() == staged.dtype()) return local.copy_from(staged);
  if (local.device().is_cpu()) return cast_into(local, staged);
  cast_into(local, staged.to(local.device()));
}

}  // namespace titan::checkpoint
