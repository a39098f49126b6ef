#include "core/cuda/caching_allocator.h"

#include <map>
#include <mutex>
#include <unordered_map>

#include "core/cuda/cuda_check.h"
#include "core/cuda/stream.h"

namespace titan::cuda {

namespace {

constexpr size_t kSmallRounding = 512;
constexpr size_t kLargeThreshold = size_t{1} << 20;
constexpr size_t kLargeRounding = size_t{2} << 20;

size_t round_size(size_t nbytes) {
  size_t unit = nbytes < kLargeThreshold ? kSmallRounding : kLargeRounding;
  size_t rounded = (nbytes + unit - 1) / unit * unit;
  return rounded == 0 ? kSmallRounding : rounded;
}

struct PoolKey {
  int device;
  cudaStream_t stream;
  friend bool operator<(const PoolKey& a, const PoolKey& b) {
    return a.device != b.device ? a.device < b.device : a.stream < b.stream;
  }
};

struct Block {
  size_t size;  // rounded
  PoolKey pool;
};

class CachingAllocator final : public Allocator {
 public:
  void* raw_allocate(size_t nbytes) override {
    PoolKey key{current_device(), current_stream()};
    size_t size = round_size(nbytes);
    std::lock_guard lock(mutex_);
    void* ptr = take_cached(key, size);  // may round `size` up to the cached block's
    if (ptr == nullptr) ptr = device_malloc(size, nbytes);
    live_.emplace(ptr, Block{size, key});
    return ptr;
  }

  void raw_deallocate(void* ptr, size_t /*nbytes*/) override {
    std::lock_guard lock(mutex_);
    auto it = live_.find(ptr);
    TT_CHECK(it != live_.end(), "CUDA allocator: free of a pointer it did not hand out");
    Block block = it->second;
    live_.erase(it);
    free_[block.pool].emplace(block.size, ptr);
    cached_bytes_ += static_cast<int64_t>(block.size);
  }

  CacheStats cache_stats() {
    std::lock_guard lock(mutex_);
    return {reserved_bytes_, cached_bytes_, device_mallocs_};
  }

  void empty_cache() {
    std::lock_guard lock(mutex_);
    release_cached();
  }

 private:
  // The smallest cached block of at least `size` and at most twice it; `size` becomes the
  // block's own size, so that freeing it puts the whole block back.
  void* take_cached(const PoolKey& key, size_t& size) {
    auto pool = free_.find(key);
    if (pool == free_.end()) return nullptr;
    auto it = pool->second.lower_bound(size);
    if (it == pool->second.end() || it->first > 2 * size) return nullptr;
    void* ptr = it->second;
    size = it->first;
    cached_bytes_ -= static_cast<int64_t>(size);
    pool->second.erase(it);
    return ptr;
  }

  void* device_malloc(size_t size, size_t requested) {
    void* ptr = nullptr;
    cudaError_t status = cudaMalloc(&ptr, size);
    if (status == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      release_cached();
      status = cudaMalloc(&ptr, size);
    }
    if (status != cudaSuccess) {
      cudaGetLastError();
      throw OutOfMemory(detail::concat(
          "CUDA out of memory: allocating ", requested, " bytes on cuda:", current_device(),
          " failed (", cudaGetErrorName(status), "); tensors hold ", stats().live_bytes,
          " bytes and the cache had ", cached_bytes_, " more"));
    }
    reserved_bytes_ += static_cast<int64_t>(size);
    device_mallocs_ += 1;
    return ptr;
  }

  void release_cached() {
    TT_CUDA_CHECK(cudaDeviceSynchronize());  // cached blocks may still be read by queued work
    for (auto& [key, blocks] : free_) {
      for (auto& [size, ptr] : blocks) {
        TT_CUDA_CHECK(cudaFree(ptr));
        reserved_bytes_ -= static_cast<int64_t>(size);
      }
    }
    free_.clear();
    cached_bytes_ = 0;
  }

  std::mutex mutex_;
  std::unordered_map<void*, Block> live_;
  std::map<PoolKey, std::multimap<size_t, void*>> free_;
  int64_t reserved_bytes_ = 0;
  int64_t cached_bytes_ = 0;
  int64_t device_mallocs_ = 0;
};

CachingAllocator& instance() {
  // Never destroyed: tensors with static lifetime may free into it during exit.
  static auto* allocator = new CachingAllocator();
  return *allocator;
}

}  // namespace

Allocator& caching_allocator() { return instance(); }
CacheStats cache_stats() { return instance().cache_stats(); }
void empty_cache() { instance().empty_cache(); }

}  // namespace titan::cuda
