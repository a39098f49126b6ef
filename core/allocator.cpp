#include "core/allocator.h"

#include <cstdlib>
#include <new>

#include "core/check.h"
#include "core/cuda/backend.h"

namespace titan {

MemoryStats Allocator::stats() const {
  return {live_bytes_.load(), peak_bytes_.load(), allocations_.load()};
}

void Allocator::reset_peak() { peak_bytes_.store(live_bytes_.load()); }

void Allocator::count_allocate(size_t nbytes) {
  int64_t live = live_bytes_.fetch_add(static_cast<int64_t>(nbytes)) + static_cast<int64_t>(nbytes);
  int64_t peak = peak_bytes_.load();
  while (live > peak && !peak_bytes_.compare_exchange_weak(peak, live)) {
  }
  allocations_.fetch_add(1);
}

void Allocator::count_deallocate(size_t nbytes) {
  live_bytes_.fetch_sub(static_cast<int64_t>(nbytes));
}

namespace {

// 64 bytes: a cache line, and enough for any SIMD load the CPU kernels or OpenBLAS issue.
constexpr size_t kCpuAlignment = 64;

class CpuAllocator final : public Allocator {
 public:
  void* allocate(size_t nbytes) override {
    size_t rounded = (nbytes + kCpuAlignment - 1) / kCpuAlignment * kCpuAlignment;
    void* ptr = std::aligned_alloc(kCpuAlignment, rounded == 0 ? kCpuAlignment : rounded);
    if (ptr == nullptr) {
      throw Error(detail::concat("out of host memory allocating ", nbytes, " bytes (",
                                 stats().live_bytes, " bytes already held by tensors)"));
    }
    count_allocate(nbytes);
    return ptr;
  }
  void deallocate(void* ptr, size_t nbytes) override {
    std::free(ptr);
    count_deallocate(nbytes);
  }
};

CpuAllocator cpu_allocator;
Allocator* cuda_allocator = nullptr;

}  // namespace

Allocator& allocator_for(Device device) {
  if (device.is_cpu()) return cpu_allocator;
  if (cuda_allocator == nullptr) cuda_allocator = cuda_backend::allocator();
  TT_CHECK(cuda_allocator != nullptr, "no allocator for ", device,
           ": this build has no CUDA backend (configure with -DTITAN_CUDA=ON)");
  return *cuda_allocator;
}

void register_allocator(DeviceType type, Allocator* allocator) {
  TT_CHECK(type == DeviceType::CUDA, "the CPU allocator is built in and cannot be replaced");
  cuda_allocator = allocator;
}

}  // namespace titan
