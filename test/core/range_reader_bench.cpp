// titan_range_reader_bench: how fast core/range_reader.h reads an existing file, the figures
// docs/checkpoint.md gives, against the single-threaded reads in large blocks it replaced.
//
//   titan_range_reader_bench FILE [REPEATS] [--cold]
//
// For each way, REPEATS times (default 3), best time kept, prints one JSON line of GB/s (10^9
// bytes a second) over the file's size:
//   crc_blocks       CRC32C over 8 MiB preads on one thread (the checkpoint check before)
//   crc_chunks_N     file_crc32c on N threads (1, and read_threads() when that is more)
//   check_blocks     64 MiB preads into one reused buffer + first_nonfinite as bf16 (the
//                    safetensors and checkpoint read before, less its conversion)
//   check_chunks_N   read_ranges on N threads into one destination, first_nonfinite per chunk
// With --cold each pass first asks the kernel to drop the file from the page cache
// (posix_fadvise DONTNEED, which needs no privilege), so the disk serves it; without, the first
// pass warms the cache. The destination of the check_* passes is allocated and touched once,
// before the passes, so page faults are not in the figures.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/crc32c.h"
#include "core/file_io.h"
#include "core/nonfinite.h"
#include "core/range_reader.h"

namespace {

using Clock = std::chrono::steady_clock;

[[noreturn]] void fail(const std::string& what) {
  std::fprintf(stderr, "titan_range_reader_bench: %s\n", what.c_str());
  std::exit(1);
}

void drop_cache(int fd) { (void)::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED); }

// The best of `repeats` runs of `pass`, in GB/s over `bytes`.
double best_rate(int fd, bool cold, int repeats, uint64_t bytes,
                 const std::function<void()>& pass) {
  double best = 1e30;
  for (int r = 0; r < repeats; ++r) {
    if (cold) drop_cache(fd);
    const auto start = Clock::now();
    pass();
    best = std::min(best, std::chrono::duration<double>(Clock::now() - start).count());
  }
  return static_cast<double>(bytes) / best / 1e9;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) fail("usage: titan_range_reader_bench FILE [REPEATS] [--cold]");
  const std::string path = argv[1];
  const int repeats = argc > 2 && argv[2][0] != '-' ? std::max(1, std::atoi(argv[2])) : 3;
  const bool cold = std::string(argv[argc - 1]) == "--cold";
  const titan::Fd fd = titan::Fd::open(path, O_RDONLY);
  struct stat st {};
  if (!fd.ok() || ::fstat(fd.get(), &st) != 0) fail("cannot open " + path);
  const auto bytes = static_cast<uint64_t>(st.st_size) / 2 * 2;  // whole bf16 elements
  if (bytes == 0) fail(path + " is empty");

  std::vector<int> thread_counts = {1};
  if (titan::read_threads() > 1) thread_counts.push_back(titan::read_threads());
  // A tensor's memory (64-byte aligned, as core's allocator gives it), touched once so that page
  // faults are not in the passes.
  std::unique_ptr<unsigned char, decltype(&std::free)> memory(
      static_cast<unsigned char*>(std::aligned_alloc(64, (bytes + 63) / 64 * 64)), &std::free);
  if (!memory) fail("cannot allocate the destination");
  std::memset(memory.get(), 0, bytes);
  unsigned char* destination = memory.get();
  std::vector<unsigned char> block(64ull << 20);
  // The check's cost is the same whatever it finds: a file's bytes read as bf16 may hold NaNs.
  auto check = [](const unsigned char* data, uint64_t n) {
    (void)titan::first_nonfinite(titan::DType::BF16, data, n / 2);
  };

  std::string json =
      "{\"file_bytes\": " + std::to_string(bytes) + ", \"cold\": " + (cold ? "true" : "false");
  auto report = [&json](const std::string& name, double rate) {
    char text[64];
    std::snprintf(text, sizeof(text), "%.2f", rate);
    json += ", \"" + name + "\": " + text;
  };
  report("crc_blocks", best_rate(fd.get(), cold, repeats, bytes, [&] {
           uint32_t crc = 0;
           for (uint64_t at = 0; at < bytes; at += 8ull << 20) {
             const uint64_t n = std::min<uint64_t>(8ull << 20, bytes - at);
             if (!titan::pread_all(fd.get(), block.data(), n, at)) fail("read failed");
             crc = titan::crc32c(block.data(), n, crc);
           }
         }));
  for (int threads : thread_counts) {
    report("crc_chunks_" + std::to_string(threads), best_rate(fd.get(), cold, repeats, bytes, [&] {
             uint32_t crc = 0;
             if (titan::file_crc32c(fd.get(), bytes, crc, {threads})) fail("read failed");
           }));
  }
  report("check_blocks", best_rate(fd.get(), cold, repeats, bytes, [&] {
           for (uint64_t at = 0; at < bytes; at += block.size()) {
             const uint64_t n = std::min<uint64_t>(block.size(), bytes - at);
             if (!titan::pread_all(fd.get(), block.data(), n, at)) fail("read failed");
             check(block.data(), n);
             std::memcpy(destination + at, block.data(), n);
           }
         }));
  for (int threads : thread_counts) {
    report(
        "check_chunks_" + std::to_string(threads), best_rate(fd.get(), cold, repeats, bytes, [&] {
          const titan::FileRange whole{0, bytes, destination};
          if (titan::read_ranges(
                  fd.get(), {&whole, 1}, 2,
                  [&](size_t, const unsigned char* data, uint64_t, uint64_t n) { check(data, n); },
                  {threads})) {
            fail("read failed");
          }
        }));
  }
  std::printf("%s}\n", json.c_str());
  return 0;
}
