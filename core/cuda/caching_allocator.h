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
// cached and requested bytes. Returning the cache synchronizes the device, so it is not done
// during a graph capture nor while peer operations are in flight (core/peer_work.h): there the
// first failure throws, saying why the cache was kept.
//
// CUDA graphs (cuda_graph.h). A captured graph replays its kernels on the very addresses they
// were captured with, long after the capture's tensors were freed, so the blocks it touched must
// not serve anything else while it exists. While a graph is captured on a stream, that stream
// allocates from a pool of the graph's own (the blocks it already has, else fresh cudaMalloc),
// and every block freed on it — made before the capture or during — goes to that pool. A block
// made during the capture may serve the capture again, which is safe because the graph replays
// in the stream's order, as it was captured; a block made before the capture is held until the
// graph is gone, never handed out inside it: what it held before the capture may be the graph's
// input on every replay.
// When the graph is destroyed its pool's blocks rejoin the stream's ordinary cache (PyTorch's
// private graph pools, without their sharing between graphs).
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

// A graph's pool, made for the current stream of the current device; from now until
// end_graph_pool() that stream allocates from it and frees into it. Throws if the stream
// already has one (one capture at a time per stream).
uint64_t begin_graph_pool();
// The capture on the current stream is over: it allocates from its ordinary cache again.
void end_graph_pool();
// The graph of `pool` is gone (and its replays finished): its cached blocks, and those of its
// tensors still alive when they are freed, rejoin the ordinary cache of the stream.
void release_graph_pool(uint64_t pool);

}  // namespace titan::cuda
