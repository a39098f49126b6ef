// Timing device work for titan_bench: CUDA events around the region, warm-up first, the median
// of many repeats (../docs/performance.md, "How the GPU figures are measured").
#pragma once

#include <functional>

namespace titan::bench {

struct Timing {
  int warmup = 5;
  int repeats = 20;
};

// Median milliseconds of `work` (issued on the current stream) over `timing.repeats` runs.
double median_ms(const std::function<void()>& work, const Timing& timing);

// Device-to-device copy bandwidth (bytes read + written per second) of a 1 GiB buffer: the
// HBM ceiling the quantize kernels are compared with.
double copy_bandwidth_bytes_per_s(const Timing& timing);

}  // namespace titan::bench
