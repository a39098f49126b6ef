// Reading large parts of a file at the disk's speed, for every reader of stored tensors
// (titan_train checkpoints, safetensors files, Hugging Face folders): the byte ranges a reader
// owns are read in chunks of 1 MiB by pread, on several threads at once, and each chunk is handed
// to the caller (its checks, its conversion into the destination) on the thread that read it,
// while the chunk is still in that core's cache.
//
// Why chunks, and not one read of a whole tensor: a read into a buffer larger than the cache
// leaves its bytes in memory, and the NaN check, the CRC and the conversion that follow read them
// back from there; on the 2-core VM a CRC over 8 MiB preads ran at 1.2 GB/s, over 1 MiB chunks
// at several times that (docs/checkpoint.md#reading-speed). Why threads: one core copying from
// the page cache, or waiting on one request to the disk at a time, is far below what a node's
// memory and an NVMe disk deliver.
//
// Why pread and not mmap: a file that shrinks under a mapping (truncated by another process, or
// by a disk that filled while it was written) turns the next access into SIGBUS, which only a
// signal handler could turn into the one line every reader owes; a pread that meets the end of
// the file returns short, and the caller names the file and the byte where it ended.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>

namespace titan {

// The chunk size: within a core's L2 cache on current x86 servers, and large enough that a
// pread's fixed cost is small beside its copy.
inline constexpr uint64_t kReadChunkBytes = uint64_t{1} << 20;

// One byte range of a file to read: `bytes` at `offset`, into `into` when set (the destination
// takes the stored bytes as they are), else into a buffer of the reader's.
struct FileRange {
  uint64_t offset = 0;
  uint64_t bytes = 0;
  void* into = nullptr;
};

// Where a read stopped: `at` bytes into ranges[range], with errno's value (0: the file ended
// before the range did: it is shorter than its header or metadata says, or shrank).
struct ReadError {
  size_t range = 0;
  uint64_t at = 0;
  int error = 0;
};

struct RangeReadOptions {
  int threads = 0;  // 0: read_threads()
  uint64_t chunk_bytes = kReadChunkBytes;
};

// Threads a read spreads over: the CPUs this process may run on, at most 8 (beyond that the
// page cache and the disk, not the cores, set the rate).
int read_threads();

// visit(range, data, at, n): bytes [at, at + n) of ranges[range], read, at `data` (inside the
// range's `into`, or in a buffer of the reader's that is valid only during the call).
using ChunkVisit =
    std::function<void(size_t range, const unsigned char* data, uint64_t at, uint64_t n)>;

// Reads every range and visits each chunk once. A chunk holds a whole number of `unit`s (the
// element size: a range's size must be a multiple of it), so a visit can check and convert the
// elements it is given. Chunks are read and visited on up to options.threads threads at once, in
// no fixed order, so visits must be safe to run together (each writes its own part of the
// destination). The first failure in file order wins, as in a read from start to end: a read
// that fails or ends short is returned (chunks after it may not be read or visited), and a visit
// that throws has its exception rethrown once every thread has stopped. nullopt: all read.
std::optional<ReadError> read_ranges(int fd, std::span<const FileRange> ranges, uint64_t unit,
                                     const ChunkVisit& visit, const RangeReadOptions& options = {});

// The CRC32C of the first `bytes` bytes of `fd`, read and summed in chunks on several threads and
// joined in order (crc32c_combine): the checksum of a checkpoint's file at the disk's speed.
// nullopt and `crc` set, or the read that failed (range 0).
std::optional<ReadError> file_crc32c(int fd, uint64_t bytes, uint32_t& crc,
                                     const RangeReadOptions& options = {});

}  // namespace titan
