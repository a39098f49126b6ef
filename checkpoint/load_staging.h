// The host memory a load reads stored tensors into on their way to the parameters, and the
// move from there: one buffer for every tensor of a load, and the conversion to the parameter's
// dtype done where the parameter lives.
//
// Why one buffer: memory the process has never touched costs a page fault per 4 KiB page on first
// use (on the 2-core VM about 0.8 s a GB, as much as reading the bytes), and a load that
// allocates a fresh host tensor per parameter pays it for every byte of the model, twice when it
// converts through another. Why convert on the device: the bytes cross PCIe as stored (bf16 is
// half of f32), and a kernel converts them at the device's memory rate where the host converted
// at a few GB/s on one core (docs/checkpoint.md#reading-speed).
#pragma once

#include "core/tensor.h"

namespace titan::checkpoint {

class HostStaging {
 public:
  HostStaging() = default;
  HostStaging(const HostStaging&) = delete;
  HostStaging& operator=(const HostStaging&) = delete;
  ~HostStaging();

  // A contiguous host tensor of `shape` and `dtype` (values left as they were), in the memory of
  // the one before when it is large enough. Valid until the next take(). With `pin`, the memory
  // is registered with CUDA (once per buffer), so copies from it to a GPU run at DMA speed.
  Tensor take(const Shape& shape, DType dtype, bool pin = false);

 private:
  void unpin();

  Tensor buffer_;  // u8 [bytes]
  void* pinned_ = nullptr;
};

// local = `staged` (host, contiguous, local's shape) in local's dtype, on local's device: copied
// as stored to a GPU and converted there by core's cast kernel, or converted on the CPU by its
// vectorized loop; a plain copy when the dtypes agree. Rounds where the dtype narrows (f32 into a
// bf16 parameter), as cast() does.
void move_into(const Tensor& local, const Tensor& staged);

}  // namespace titan::checkpoint
