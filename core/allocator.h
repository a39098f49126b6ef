// Device memory allocation and its accounting.
//
// Every tensor's bytes come from the allocator of its device, which counts live and peak bytes.
// Those counts are what the metrics line reports as peak memory, what the activation-checkpoint
// bench measures, and (later) what FSDP's memory figures are made of: on every device, "memory"
// means bytes held by tensors, the figure torch.cuda.max_memory_allocated() reports.
//
// The CPU allocator hands out 64-byte aligned blocks straight from the system allocator. CUDA
// tensors come from the caching allocator of core/cuda/caching_allocator.h (a test may register
// another one for DeviceType::CUDA).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "core/device.h"

namespace titan {

struct MemoryStats {
  int64_t live_bytes = 0;   // held by tensors now
  int64_t peak_bytes = 0;   // most held at once since the last reset_peak()
  int64_t allocations = 0;  // number of allocate() calls since start
};

class Allocator {
 public:
  virtual ~Allocator() = default;
  virtual void* allocate(size_t nbytes) = 0;
  virtual void deallocate(void* ptr, size_t nbytes) = 0;

  MemoryStats stats() const;
  // Starts a new peak window at the current live bytes (as torch.cuda.reset_peak_memory_stats).
  void reset_peak();

 protected:
  void count_allocate(size_t nbytes);
  void count_deallocate(size_t nbytes);

 private:
  std::atomic<int64_t> live_bytes_{0};
  std::atomic<int64_t> peak_bytes_{0};
  std::atomic<int64_t> allocations_{0};
};

// The allocator for a device. CPU always exists; CUDA is the caching allocator in a CUDA
// build, and an Error saying the build has no CUDA backend otherwise.
Allocator& allocator_for(Device device);

// Called once by a backend at start-up; the allocator must outlive every tensor.
void register_allocator(DeviceType type, Allocator* allocator);

}  // namespace titan
