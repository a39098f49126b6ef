// The CUDA caching allocator: device memory is taken from the driver once and reused, so a
// training step makes no cudaMalloc/cudaFree calls once the first step has warmed the cache.
//
// Blocks are cached per (device, stream): a freed block is handed out again only to work on
// the stream it was allocated on, where stream order makes the reuse safe without a sync (the
// rule PyTorch's allocator follows). A tensor used on a second stream must be kept alive by
// its owner until that stream is done with it (an Event), as with torch's record_stream.
//
// Sizes are rounded up to 512 bytes (2 MiB above 1 MiB); a cached block is reused for a
// request of at least half its size. When the driver is out of memory, the cache is returned
// to it and the allocation retried once; a second failure throws an Error with the live,
// cached and requested bytes.
#pragma once

#include <cstdint>

#include "core/allocator.h"

namespace titan::cuda {

// The allocator registered for DeviceType::CUDA.
Allocator& caching_allocator();

struct CacheStats {
  int64_t reserved_bytes = 0;  // taken from the driver: live + cached
  int64_t cached_bytes = 0;    // free blocks kept for reuse
  int64_t device_mallocs = 0;  // cudaMalloc calls since start (flat after warm-up)
};
CacheStats cache_stats();

// Returns every cached (free) block to the driver.
void empty_cache();

}  // namespace titan::cuda
