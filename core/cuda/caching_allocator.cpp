#include "core/cuda/caching_allocator.h"

#include <map>
#include <mutex>
#include <set>
#include <unordered_map>
#include <utility>

#include "core/cuda/cuda_check.h"
#include "core/cuda/stream.h"
#include "core/peer_work.h"

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
  uint64_t graph = 0;  // 0: the stream's ordinary cache; else a graph's pool
  // In a graph's pool, a block made before its capture and freed during it: the graph may read
  // what it held then on every replay, so nothing gets it until the graph is gone.
  bool held = false;
  friend bool operator<(const PoolKey& a, const PoolKey& b) {
    if (a.device != b.device) return a.device < b.device;
    if (a.stream != b.stream) return a.stream < b.stream;
    if (a.graph != b.graph) return a.graph < b.graph;
    return a.held < b.held;
  }
};

// A stream of a device, without the pool.
using StreamKey = std::pair<int, cudaStream_t>;

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
    key.graph = capturing(key);
    void* ptr = take_cached(key, size);  // may round `size` up to the cached block's
    if (ptr == nullptr) ptr = device_malloc(size, nbytes, key.graph != 0);
    live_.emplace(ptr, Block{size, key});
    return ptr;
  }

  void raw_deallocate(void* ptr, size_t /*nbytes*/) override {
    std::lock_guard lock(mutex_);
    auto it = live_.find(ptr);
    TT_CHECK(it != live_.end(), "CUDA allocator: free of a pointer it did not hand out");
    Block block = it->second;
    live_.erase(it);
    // Freed during a capture: the graph may use it on replay, so the graph keeps it. Made during
    // this capture, it may serve the capture again (the replay writes it before it reads it, in
    // the captured order); made before, it is held: its contents from before the capture may be
    // the graph's input, which a block handed out again inside the capture would overwrite on
    // every replay. A block of a graph already gone is ordinary again.
    if (const uint64_t graph = capturing(block.pool); graph != 0) {
      block.pool.held = block.pool.graph != graph;
      block.pool.graph = graph;
    }
    if (block.pool.graph != 0 && !open_graphs_.contains(block.pool.graph)) {
      block.pool.graph = 0;
      block.pool.held = false;
    }
    free_[block.pool].emplace(block.size, ptr);
    cached_bytes_ += static_cast<int64_t>(block.size);
  }

  uint64_t begin_graph_pool() {
    const StreamKey stream{current_device(), current_stream()};
    std::lock_guard lock(mutex_);
    TT_CHECK(!capturing_.contains(stream),
             "CUDA allocator: a second graph capture on one stream while the first is under way; "
             "end the first capture before starting another");
    const uint64_t graph = ++last_graph_;
    capturing_[stream] = graph;
    open_graphs_.insert(graph);
    return graph;
  }

  void end_graph_pool() {
    std::lock_guard lock(mutex_);
    capturing_.erase({current_device(), current_stream()});
  }

  void release_graph_pool(uint64_t graph) {
    std::lock_guard lock(mutex_);
    open_graphs_.erase(graph);
    for (auto it = free_.begin(); it != free_.end();) {
      if (it->first.graph != graph) {
        ++it;
        continue;
      }
      PoolKey ordinary = it->first;
      ordinary.graph = 0;
      ordinary.held = false;
      free_[ordinary].merge(it->second);
      it = free_.erase(it);
    }
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
  // The graph pool the stream of `key` allocates from, or 0. Called with the lock held.
  uint64_t capturing(const PoolKey& key) const {
    if (capturing_.empty()) return 0;  // the common case: no capture anywhere
    auto it = capturing_.find({key.device, key.stream});
    return it == capturing_.end() ? 0 : it->second;
  }

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

  // cudaMalloc is allowed during a relaxed-mode capture (cuda_graph.h), but returning the cache
  // to the driver is not: it synchronizes the device.
  // Nor while peer operations are in flight (core/peer_work.h): the device-wide synchronisation
  // could wait forever on a posted receive whose sender waits for this rank.
  void* device_malloc(size_t size, size_t requested, bool in_capture) {
    void* ptr = nullptr;
    cudaError_t status = cudaMalloc(&ptr, size);
    const bool peer_work = peer_work_in_flight();
    if (status == cudaErrorMemoryAllocation && !in_capture && !peer_work) {
      cudaGetLastError();
      release_cached();
      status = cudaMalloc(&ptr, size);
    }
    if (status != cudaSuccess) {
      cudaGetLastError();
      const char* why_kept =
          in_capture ? " (during a CUDA graph capture, which cannot return the cache to the "
                       "driver; run without the graph)"
          : peer_work && cached_bytes_ > 0
              ? " (kept: the pipeline's messages are in flight, and returning the cache to the "
                "driver synchronizes the device, which can deadlock against a posted receive; "
                "lower training.local_batch_size or the microbatch size, or check "
                "titan_train --plan)"
              : "";
      throw OutOfMemory(detail::concat("CUDA out of memory: allocating ", requested,
                                       " bytes on cuda:", current_device(), " failed (",
                                       cudaGetErrorName(status), "); tensors hold ",
                                       stats().live_bytes, " bytes and the cache had ",
                                       cached_bytes_, " more", why_kept));
    }
    reserved_bytes_ += static_cast<int64_t>(size);
    device_mallocs_ += 1;
    return ptr;
  }

  // A graph's pool stays: its graph replays on those addresses.
  void release_cached() {
    TT_CHECK(!peer_work_in_flight(),
             "CUDA allocator: emptying the cache while the pipeline's messages are in flight (it "
             "synchronizes the device, which can deadlock against a posted receive); empty it "
             "between steps");
    TT_CHECK(capturing_.empty(),
             "CUDA allocator: emptying the cache during a CUDA graph capture (it synchronizes the "
             "device, which a capture cannot record); empty it before capturing or after");
    TT_CUDA_CHECK(cudaDeviceSynchronize());  // cached blocks may still be read by queued work
    for (auto it = free_.begin(); it != free_.end();) {
      if (it->first.graph != 0) {
        ++it;
        continue;
      }
      for (auto& [size, ptr] : it->second) {
        TT_CUDA_CHECK(cudaFree(ptr));
        reserved_bytes_ -= static_cast<int64_t>(size);
        cached_bytes_ -= static_cast<int64_t>(size);
      }
      it = free_.erase(it);
    }
  }

  std::mutex mutex_;
  std::unordered_map<void*, Block> live_;
  std::map<PoolKey, std::multimap<size_t, void*>> free_;
  std::map<StreamKey, uint64_t> capturing_;  // streams under capture, and their graph's pool
  std::set<uint64_t> open_graphs_;           // pools whose graph still exists
  uint64_t last_graph_ = 0;
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
uint64_t begin_graph_pool() { return instance().begin_graph_pool(); }
void end_graph_pool() { instance().end_graph_pool(); }
void release_graph_pool(uint64_t pool) { instance().release_graph_pool(pool); }

}  // namespace titan::cuda
