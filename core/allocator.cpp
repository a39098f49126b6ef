#include "core/allocator.h"

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <new>

#include "core/cuda/backend.h"

namespace titan {

namespace {

constexpr int64_t kMiB = int64_t{1} << 20;

// TITAN_DEVICE_MEMORY_LIMIT_MB: pretend every device holds this many MiB of tensors, so that
// running out of memory (and what the job does then) can be tried on a machine with plenty.
// 0 (unset) means no limit but the device's own.
int64_t memory_limit_bytes() {
  static const int64_t limit = [] {
    const char* text = std::getenv("TITAN_DEVICE_MEMORY_LIMIT_MB");
    if (text == nullptr || *text == '\0') return int64_t{0};
    char* end = nullptr;
    errno = 0;
    const long long mib = std::strtoll(text, &end, 10);
    // Above 2^43 MiB the byte count overflows int64 (strtoll saturates with ERANGE first).
    if (*end != '\0' || mib <= 0 || errno == ERANGE || mib > INT64_MAX / kMiB) {
      throw InputError(detail::concat("TITAN_DEVICE_MEMORY_LIMIT_MB: '", text,
                                      "' is not a positive number of MiB (at most ",
                                      INT64_MAX / kMiB, "); unset it, or write e.g. 512"));
    }
    return static_cast<int64_t>(mib) * kMiB;
  }();
  return limit;
}

}  // namespace

int Allocator::slot_of(MemoryTag tag) {
  if (tag.category != MemoryCategory::Activations) return static_cast<int>(tag.category);
  return kMemoryCategories + 1 + std::clamp(tag.block, -1, kBlockSlots - 1);
}

MemoryTag Allocator::tag_of_slot(int slot) {
  if (slot < kMemoryCategories) return {static_cast<MemoryCategory>(slot), -1};
  return MemoryTag::activations(slot - kMemoryCategories - 1);
}

void* Allocator::allocate(size_t nbytes, MemoryTag tag) {
  const int64_t limit = memory_limit_bytes();
  if (limit > 0 && live_bytes_.load() + static_cast<int64_t>(nbytes) > limit) {
    throw OutOfMemory(detail::concat("out of memory allocating ", nbytes, " bytes for ",
                                     memory_tag_name(tag), ": ", live_bytes_.load(),
                                     " bytes already held by tensors, and "
                                     "TITAN_DEVICE_MEMORY_LIMIT_MB allows ",
                                     limit / kMiB, " MiB"));
  }
  void* ptr = raw_allocate(nbytes);
  count_allocate(nbytes, slot_of(tag));
  return ptr;
}

void Allocator::deallocate(void* ptr, size_t nbytes, MemoryTag tag) {
  raw_deallocate(ptr, nbytes);
  count_deallocate(nbytes, slot_of(tag));
}

MemoryStats Allocator::stats() const {
  return {live_bytes_.load(), peak_bytes_.load(), allocations_.load()};
}

void Allocator::reset_peak() { peak_bytes_.store(live_bytes_.load()); }

void Allocator::count_allocate(size_t nbytes, int slot) {
  const auto n = static_cast<int64_t>(nbytes);
  std::unique_lock<std::mutex> lock;
  if (tracking_.load(std::memory_order_relaxed)) lock = std::unique_lock(breakdown_mutex_);
  const int64_t live = live_bytes_.fetch_add(n) + n;
  live_by_slot_[slot].fetch_add(n);
  int64_t peak = peak_bytes_.load();
  while (live > peak && !peak_bytes_.compare_exchange_weak(peak, live)) {
  }
  allocations_.fetch_add(1);
  if (lock.owns_lock() && live > tracked_peak_) {
    tracked_peak_ = live;
    for (int s = 0; s < kTagSlots; ++s) at_tracked_peak_[s] = live_by_slot_[s].load();
  }
}

void Allocator::count_deallocate(size_t nbytes, int slot) {
  const auto n = static_cast<int64_t>(nbytes);
  std::unique_lock<std::mutex> lock;
  if (tracking_.load(std::memory_order_relaxed)) lock = std::unique_lock(breakdown_mutex_);
  live_bytes_.fetch_sub(n);
  live_by_slot_[slot].fetch_sub(n);
}

void Allocator::track_peak_breakdown() {
  std::lock_guard lock(breakdown_mutex_);
  tracking_.store(true);
  tracked_peak_ = live_bytes_.load();
  for (int s = 0; s < kTagSlots; ++s) at_tracked_peak_[s] = live_by_slot_[s].load();
}

MemoryBreakdown Allocator::breakdown_of(const std::array<int64_t, kTagSlots>& bytes) const {
  MemoryBreakdown out;
  for (int s = 0; s < kTagSlots; ++s) {
    if (bytes[s] == 0) continue;
    out.total_bytes += bytes[s];
    out.by_tag.emplace_back(memory_tag_name(tag_of_slot(s)), bytes[s]);
  }
  std::stable_sort(out.by_tag.begin(), out.by_tag.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  return out;
}

MemoryBreakdown Allocator::peak_breakdown() const {
  std::lock_guard lock(breakdown_mutex_);
  return breakdown_of(at_tracked_peak_);
}

MemoryBreakdown Allocator::live_breakdown() const {
  std::lock_guard lock(breakdown_mutex_);
  std::array<int64_t, kTagSlots> now{};
  for (int s = 0; s < kTagSlots; ++s) now[s] = live_by_slot_[s].load();
  return breakdown_of(now);
}

namespace {

// 64 bytes: a cache line, and enough for any SIMD load the CPU kernels or OpenBLAS issue.
constexpr size_t kCpuAlignment = 64;

class CpuAllocator final : public Allocator {
 protected:
  void* raw_allocate(size_t nbytes) override {
    size_t rounded = (nbytes + kCpuAlignment - 1) / kCpuAlignment * kCpuAlignment;
    void* ptr = std::aligned_alloc(kCpuAlignment, rounded == 0 ? kCpuAlignment : rounded);
    if (ptr == nullptr) {
      throw OutOfMemory(detail::concat("out of host memory allocating ", nbytes, " bytes (",
                                       stats().live_bytes, " bytes already held by tensors)"));
    }
    return ptr;
  }
  void raw_deallocate(void* ptr, size_t /*nbytes*/) override { std::free(ptr); }
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
