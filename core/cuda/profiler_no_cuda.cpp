// The device half of the profiler in a build without the CUDA backend: there is no device to
// time, and asking for one says so.
#include "core/check.h"
#include "core/cuda/profiler_device.h"

namespace titan::profiler::device {

void start() {
  throw Error(
      "profiler: device spans (on_cuda) asked of a build without the CUDA backend; configure "
      "with -DTITAN_CUDA=ON where nvcc is installed, or profile the CPU run without them");
}
int32_t begin(const char*) { return -1; }
void end(int32_t, bool) noexcept {}
std::vector<Interval> finish() { return {}; }

}  // namespace titan::profiler::device
