// Device memory allocation and its accounting.
//
// Every tensor's bytes come from the allocator of its device, which counts live and peak bytes.
// Those counts are what the metrics line reports as peak memory, what the activation-checkpoint
// bench measures, and what FSDP's memory figures are made of: on every device, "memory" means
// bytes held by tensors, the figure torch.cuda.max_memory_allocated() reports.
//
// Each allocation also carries a MemoryTag (core/memory_tag.h: parameters, gradients, block 3's
// activations, …), and the allocator keeps the live bytes of every tag. When asked to
// (track_peak_breakdown), it also keeps the tags' bytes at the moment of the peak, taken under
// one lock with the peak itself, so the breakdown adds up to the peak exactly: the memory
// snapshot of profiling.enable_memory_snapshot.
//
// The CPU allocator hands out 64-byte aligned blocks straight from the system allocator. CUDA
// tensors come from the caching allocator of core/cuda/caching_allocator.h (a test may register
// another one for DeviceType::CUDA).
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "core/check.h"
#include "core/device.h"
#include "core/memory_tag.h"

namespace titan {

// An allocation the device (or the limit TITAN_DEVICE_MEMORY_LIMIT_MB) could not satisfy.
class OutOfMemory : public Error {
 public:
  using Error::Error;
};

struct MemoryStats {
  int64_t live_bytes = 0;   // held by tensors now
  int64_t peak_bytes = 0;   // most held at once since the last reset_peak()
  int64_t allocations = 0;  // number of allocate() calls since start
};

// Bytes held per tag, the tags with none left out, largest first. Sums to total_bytes.
struct MemoryBreakdown {
  int64_t total_bytes = 0;
  std::vector<std::pair<std::string, int64_t>> by_tag;  // memory_tag_name → bytes
};

class Allocator {
 public:
  virtual ~Allocator() = default;

  // Bytes for a tensor, counted under `tag`; the caller (Storage) hands the same tag back.
  // Throws OutOfMemory when the device, or TITAN_DEVICE_MEMORY_LIMIT_MB, refuses.
  void* allocate(size_t nbytes, MemoryTag tag);
  void deallocate(void* ptr, size_t nbytes, MemoryTag tag);

  MemoryStats stats() const;
  // Starts a new peak window at the current live bytes (as torch.cuda.reset_peak_memory_stats).
  void reset_peak();

  // From now on, keep the tags' bytes at the highest live total since this call (a separate
  // peak from stats().peak_bytes, which the metrics window resets). Costs a lock per
  // allocation while on.
  void track_peak_breakdown();
  // The highest live total since track_peak_breakdown(), and the tags' bytes at that moment.
  MemoryBreakdown peak_breakdown() const;
  // The tags' bytes now.
  MemoryBreakdown live_breakdown() const;

 protected:
  virtual void* raw_allocate(size_t nbytes) = 0;
  virtual void raw_deallocate(void* ptr, size_t nbytes) = 0;

 private:
  // Slots: the non-activation categories, then activations outside the blocks (block -1),
  // then block 0, 1, …; blocks past the last slot share it.
  static constexpr int kBlockSlots = 512;
  static constexpr int kTagSlots = kMemoryCategories + 1 + kBlockSlots;
  static int slot_of(MemoryTag tag);
  static MemoryTag tag_of_slot(int slot);
  MemoryBreakdown breakdown_of(const std::array<int64_t, kTagSlots>& bytes) const;
  void count_allocate(size_t nbytes, int slot);
  void count_deallocate(size_t nbytes, int slot);

  std::atomic<int64_t> live_bytes_{0};
  std::atomic<int64_t> peak_bytes_{0};
  std::atomic<int64_t> allocations_{0};
  std::array<std::atomic<int64_t>, kTagSlots> live_by_slot_{};
  // The breakdown at the tracked peak, under breakdown_mutex_ while tracking.
  std::atomic<bool> tracking_{false};
  mutable std::mutex breakdown_mutex_;
  int64_t tracked_peak_ = 0;
  std::array<int64_t, kTagSlots> at_tracked_peak_{};
};

// The allocator for a device. CPU always exists; CUDA is the caching allocator in a CUDA
// build, and an Error saying the build has no CUDA backend otherwise.
Allocator& allocator_for(Device device);

// Called once by a backend at start-up; the allocator must outlive every tensor.
void register_allocator(DeviceType type, Allocator* allocator);

}  // namespace titan
