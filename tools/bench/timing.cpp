#include "tools/bench/timing.h"

#include <algorithm>
#include <vector>

#include "core/cuda/cuda_check.h"
#include "core/cuda/stream.h"
#include "core/tensor.h"

namespace titan::bench {

double median_ms(const std::function<void()>& work, const Timing& timing) {
  for (int i = 0; i < timing.warmup; ++i) work();
  std::vector<double> ms;
  cuda::Event start(true), stop(true);
  for (int i = 0; i < timing.repeats; ++i) {
    start.record();
    work();
    stop.record();
    stop.synchronize();
    ms.push_back(stop.elapsed_ms_since(start));
  }
  std::nth_element(ms.begin(), ms.begin() + ms.size() / 2, ms.end());
  return ms[ms.size() / 2];
}

double copy_bandwidth_bytes_per_s(const Timing& timing) {
  const int64_t bytes = int64_t{1} << 30;
  Device gpu = Device::cuda(cuda::current_device());
  Tensor src = Tensor::empty({bytes}, DType::U8, gpu), dst = Tensor::empty({bytes}, DType::U8, gpu);
  src.fill_(7);
  double ms = median_ms([&] { dst.copy_from(src); }, timing);
  return 2.0 * static_cast<double>(bytes) / (ms * 1e-3);
}

}  // namespace titan::bench
