// titan_nonfinite_bench: what the NaN/Inf check of every load (core/nonfinite.h) costs beside
// the read it follows, the figures docs/checkpoint.md gives.
//
//   titan_nonfinite_bench FOLDER [MIB] [REPEATS]
//
// Writes a file of MIB MiB (default 512) of finite values into FOLDER, then, REPEATS times
// (default 5), reads it back in 64 MiB preads (a checkpoint reader's band; the file is in the
// page cache after the first pass) with and without first_nonfinite() over each block, as f32
// and as bf16; and checks a block already in memory alone. Prints one JSON line of the best
// times as GB/s (10^9 bytes a second). The file is removed at the end.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "core/bf16.h"
#include "core/file_io.h"
#include "core/nonfinite.h"

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

constexpr uint64_t kBand = 64ull << 20;

// Reads `path` (`bytes` long) in bands; with `dtype` set, checks each band as that dtype.
// Returns the seconds it took; exits when a value is not finite (the file holds none).
double read_file(const std::string& path, uint64_t bytes, std::vector<unsigned char>& band,
                 const titan::DType* dtype) {
  const titan::Fd fd = titan::Fd::open(path, O_RDONLY);
  const auto start = Clock::now();
  for (uint64_t at = 0; at < bytes; at += kBand) {
    const uint64_t n = std::min(kBand, bytes - at);
    if (!titan::pread_all(fd.get(), band.data(), n, at)) {
      std::fprintf(stderr, "titan_nonfinite_bench: cannot read %s\n", path.c_str());
      std::exit(1);
    }
    if (dtype && titan::first_nonfinite(*dtype, band.data(), n / titan::dtype_size(*dtype))) {
      std::fprintf(stderr, "titan_nonfinite_bench: the check found a value that is not finite\n");
      std::exit(1);
    }
  }
  return seconds_since(start);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || argc > 4) {
    std::fprintf(stderr, "usage: titan_nonfinite_bench FOLDER [MIB] [REPEATS]\n");
    return 2;
  }
  const uint64_t mib = argc > 2 ? std::stoull(argv[2]) : 512;
  const int repeats = argc > 3 ? std::stoi(argv[3]) : 5;
  const uint64_t bytes = mib << 20;
  const std::string path = std::string(argv[1]) + "/titan_nonfinite_bench.bin";

  // Finite values of both readings: f32 words whose halves are finite bf16 too.
  std::vector<unsigned char> band(std::min(kBand, bytes));
  for (size_t i = 0; i + 4 <= band.size(); i += 4) {
    const uint16_t half = titan::float_to_bf16(1.0f + static_cast<float>(i % 997) / 997.0f).bits;
    const uint32_t word = (static_cast<uint32_t>(half) << 16) | half;
    std::memcpy(&band[i], &word, 4);
  }
  {
    const titan::Fd fd = titan::Fd::open(path, O_WRONLY | O_CREAT | O_TRUNC);
    for (uint64_t at = 0; at < bytes; at += band.size()) {
      if (!titan::write_all(fd.get(), band.data(), std::min<uint64_t>(band.size(), bytes - at))) {
        std::fprintf(stderr, "titan_nonfinite_bench: cannot write %s\n", path.c_str());
        return 1;
      }
    }
  }

  const titan::DType f32 = titan::DType::F32, bf16 = titan::DType::BF16;
  double read = 1e30, read_f32 = 1e30, read_bf16 = 1e30, check_f32 = 1e30, check_bf16 = 1e30;
  for (int r = 0; r < repeats; ++r) {
    read = std::min(read, read_file(path, bytes, band, nullptr));
    read_f32 = std::min(read_f32, read_file(path, bytes, band, &f32));
    read_bf16 = std::min(read_bf16, read_file(path, bytes, band, &bf16));
    auto start = Clock::now();
    if (titan::first_nonfinite(f32, band.data(), band.size() / 4)) return 1;
    check_f32 = std::min(check_f32, seconds_since(start));
    start = Clock::now();
    if (titan::first_nonfinite(bf16, band.data(), band.size() / 2)) return 1;
    check_bf16 = std::min(check_bf16, seconds_since(start));
  }
  std::filesystem::remove(path);
  const double gb = static_cast<double>(bytes) / 1e9,
               band_gb = static_cast<double>(band.size()) / 1e9;
  std::printf(
      "{\"file_mib\": %llu, \"read_gb_s\": %.2f, \"read_check_f32_gb_s\": %.2f, "
      "\"read_check_bf16_gb_s\": %.2f, \"check_f32_gb_s\": %.2f, \"check_bf16_gb_s\": %.2f}\n",
      static_cast<unsigned long long>(mib), gb / read, gb / read_f32, gb / read_bf16,
      band_gb / check_f32, band_gb / check_bf16);
  return 0;
}
