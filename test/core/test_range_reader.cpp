// core/range_reader.h, the reader under every load of stored tensors, and crc32c_combine, which
// lets it checksum a file on several threads: every byte of every range is read once and
// visited whole elements at a time, on 1 to 4 threads, into place (aligned or not) or through
// its buffers; a range past the end of the file, a file that shrinks while it is read, and a
// visit that throws are each reported as the first failure in file order, as a read from start
// to end would meet it.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/crc32c.h"
#include "core/file_io.h"
#include "core/range_reader.h"
#include "support/process.h"

namespace titan {
namespace {

// Byte i of the test files: a pattern with no period a chunk size shares.
unsigned char byte_at(uint64_t i) { return static_cast<unsigned char>((i * 131 + i / 251) & 0xFF); }

std::string write_pattern(const std::string& name, uint64_t bytes) {
  const std::string path = testing::scratch_dir("range_reader") + "/" + name;
  std::vector<unsigned char> data(bytes);
  for (uint64_t i = 0; i < bytes; ++i) data[i] = byte_at(i);
  const Fd fd = Fd::open(path, O_WRONLY | O_CREAT | O_TRUNC);
  REQUIRE(fd.ok());
  REQUIRE(write_all(fd.get(), data.data(), bytes));
  return path;
}

}  // namespace

TEST_SUITE("fast") {
  TEST_CASE("crc32c_combine joins the CRCs of two pieces into the CRC of both") {
    std::string bytes(5000, '\0');
    for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>(byte_at(i));
    for (size_t split :
         {size_t{0}, size_t{1}, size_t{7}, size_t{64}, size_t{2500}, size_t{4999}, size_t{5000}}) {
      const std::string_view a(bytes.data(), split), b(bytes.data() + split, bytes.size() - split);
      CHECK(crc32c_combine(crc32c(a), crc32c(b), b.size()) == crc32c(bytes));
    }
    CHECK(crc32c("123456789") == 0xE3069283u);
  }

  TEST_CASE("read_ranges reads every byte of every range once and whole elements at a time") {
    const uint64_t size = 100000;
    const std::string path = write_pattern("whole.bin", size);
    const Fd fd = Fd::open(path, O_RDONLY);
    REQUIRE(fd.ok());
    // Read into the reader's buffers (the visit copies), or into place: 64-byte aligned (the
    // kernel writes there), or not (through a buffer, then copied).
    enum class Into { Buffer, Aligned, Unaligned };
    for (int threads : {1, 2, 4}) {
      for (Into mode : {Into::Buffer, Into::Aligned, Into::Unaligned}) {
        CAPTURE(threads);
        CAPTURE(static_cast<int>(mode));
        const bool into = mode != Into::Buffer;
        // Element size 4, chunks of 1000 bytes; ranges large and small, one empty, one at the end.
        const std::vector<std::pair<uint64_t, uint64_t>> spans = {
            {0, 40000}, {40004, 4}, {50000, 0}, {60000, 12344}, {size - 4000, 4000}};
        std::vector<std::vector<unsigned char>> storage(spans.size());
        std::vector<unsigned char*> out(spans.size());
        std::vector<FileRange> ranges;
        for (size_t r = 0; r < spans.size(); ++r) {
          storage[r].assign(spans[r].second + 128, 0);
          const auto base = reinterpret_cast<uintptr_t>(storage[r].data());
          out[r] = storage[r].data() + (64 - base % 64) + (mode == Into::Unaligned ? 4 : 0);
          ranges.push_back({spans[r].first, spans[r].second, into ? out[r] : nullptr});
        }
        std::vector<std::vector<int>> visits(spans.size());
        for (size_t r = 0; r < spans.size(); ++r) visits[r].assign(spans[r].second, 0);
        std::mutex mutex;
        const std::optional<ReadError> error =
            read_ranges(fd.get(), ranges, 4,
                        [&](size_t r, const unsigned char* data, uint64_t at, uint64_t n) {
                          CHECK(n % 4 == 0);
                          CHECK(n <= 1000);
                          if (into) CHECK(data == out[r] + at);
                          if (!into) std::memcpy(out[r] + at, data, n);
                          const std::lock_guard lock(mutex);
                          for (uint64_t i = at; i < at + n; ++i) ++visits[r][i];
                        },
                        {threads, 1000});
        CHECK(!error);
        for (size_t r = 0; r < spans.size(); ++r) {
          for (uint64_t i = 0; i < spans[r].second; ++i) {
            if (out[r][i] != byte_at(spans[r].first + i) || visits[r][i] != 1) {
              FAIL("range ", r, " byte ", i, ": read ", int{out[r][i]}, ", visited ", visits[r][i],
                   " times");
            }
          }
        }
      }
    }
  }

  TEST_CASE(
      "read_ranges: a range past the end of the file is the first failure and read up to it") {
    const std::string path = write_pattern("short.bin", 10000);
    const Fd fd = Fd::open(path, O_RDONLY);
    REQUIRE(fd.ok());
    for (int threads : {1, 3}) {
      CAPTURE(threads);
      // Range 1 runs 2000 bytes past the end; range 2 starts past it.
      const std::vector<FileRange> ranges = {{0, 4000}, {8000, 4000}, {11000, 100}};
      std::atomic<uint64_t> before_end{0};
      const std::optional<ReadError> error =
          read_ranges(fd.get(), ranges, 1,
                      [&](size_t r, const unsigned char*, uint64_t, uint64_t n) {
                        if (r == 0) before_end += n;
                      },
                      {threads, 1000});
      REQUIRE(error);
      CHECK(error->range == 1);
      CHECK(error->at == 2000);  // bytes [8000, 10000) were there
      CHECK(error->error == 0);  // the file ended; no errno
      CHECK(before_end == 4000);
    }
  }

  TEST_CASE("read_ranges: a file that shrinks while it is read fails the read with no signal") {
    const std::string path = write_pattern("shrinks.bin", 64000);
    const Fd fd = Fd::open(path, O_RDONLY);
    REQUIRE(fd.ok());
    const FileRange whole{0, 64000};
    // One thread, so the chunks come in order: the first one's visit cuts the file to 10000
    // bytes (as another process truncating it would), and the read meets the new end.
    const std::optional<ReadError> error =
        read_ranges(fd.get(), {&whole, 1}, 1,
                    [&](size_t, const unsigned char*, uint64_t at, uint64_t) {
                      if (at == 0) REQUIRE(::truncate(path.c_str(), 10000) == 0);
                    },
                    {1, 4000});
    REQUIRE(error);
    CHECK(error->at == 10000);
    CHECK(error->error == 0);
  }

  TEST_CASE("read_ranges rethrows the exception of the first chunk in file order") {
    const std::string path = write_pattern("throws.bin", 50000);
    const Fd fd = Fd::open(path, O_RDONLY);
    REQUIRE(fd.ok());
    const FileRange whole{0, 50000};
    for (int threads : {1, 2, 4}) {
      CAPTURE(threads);
      // Chunks 12 and 40 (of 1000 bytes) throw; whichever thread meets which first, the message
      // is chunk 12's, as a read from the start would report it.
      CHECK_THROWS_WITH_AS(
          read_ranges(fd.get(), {&whole, 1}, 1,
                      [](size_t, const unsigned char*, uint64_t at, uint64_t) {
                        if (at == 12000 || at == 40000) {
                          throw std::runtime_error("bad chunk at " + std::to_string(at));
                        }
                      },
                      {threads, 1000}),
          "bad chunk at 12000", std::runtime_error);
    }
  }

  TEST_CASE("file_crc32c is the CRC32C of the file bytes on any number of threads") {
    const uint64_t size = 123457;
    const std::string path = write_pattern("crc.bin", size);
    std::string bytes(size, '\0');
    for (uint64_t i = 0; i < size; ++i) bytes[i] = static_cast<char>(byte_at(i));
    const Fd fd = Fd::open(path, O_RDONLY);
    REQUIRE(fd.ok());
    for (int threads : {1, 2, 3}) {
      for (uint64_t chunk : {uint64_t{4096}, uint64_t{1000}, kReadChunkBytes}) {
        uint32_t crc = 0;
        CHECK(!file_crc32c(fd.get(), size, crc, {threads, chunk}));
        CHECK(crc == crc32c(bytes));
      }
    }
    uint32_t crc = 0;
    const std::optional<ReadError> error = file_crc32c(fd.get(), size + 10, crc, {2, 4096});
    REQUIRE(error);
    CHECK(error->at == size);
    CHECK(error->error == 0);
  }
}

}  // namespace titan
