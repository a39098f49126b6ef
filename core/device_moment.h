// A moment in one device's work, for timing that work.
//
// On the CPU the host does the work as it goes, so a moment is the host clock's. On CUDA the
// host only queues the work: its clock reads the launches, and the time lands wherever the host
// next blocks on the stream. So on CUDA a moment is a timing event on the current stream, which
// the stream passes when the work queued before it is done; the device time between two moments
// is what the work between them took on the GPU, the stream's idle time included (a wait for a
// transfer, a host that queued nothing). WaitClock times waits with them; the pipeline executor
// times each compute.
#pragma once

#include <chrono>
#include <memory>

#include "core/device.h"

namespace titan {

namespace cuda_backend {
class StreamMark;
}

class DeviceMoment {
 public:
  // Now, in `device`'s work. Never throws: on CUDA a mark that cannot be recorded (a CUDA error,
  // which the run's next real call reports) makes an empty moment, and every interval that
  // ends or starts at it reads 0. Like the profiler, timing never stops a run.
  static DeviceMoment now(const Device& device);

  DeviceMoment();
  ~DeviceMoment();
  DeviceMoment(DeviceMoment&&) noexcept;
  DeviceMoment& operator=(DeviceMoment&&) noexcept;

  // Whether the device has got there, without blocking: always on the CPU; on CUDA once the
  // stream has run everything queued before the moment.
  bool passed() const;

  // Seconds from `earlier` (a moment of the same device, on the same stream on CUDA) to this
  // one. On CUDA it waits until the stream has passed this moment.
  double seconds_since(const DeviceMoment& earlier) const;

 private:
  std::chrono::steady_clock::time_point host_;
  std::unique_ptr<cuda_backend::StreamMark> mark_;  // on CUDA; null on the CPU or when refused
  bool on_cuda_ = false;
};

// The work between two moments of one device: a wait, a compute.
struct DeviceInterval {
  DeviceMoment start, end;
  // Whether the device has got to its end (without blocking).
  bool passed() const { return end.passed(); }
  // Its seconds on the device; on CUDA it waits until the stream has passed its end.
  double seconds() const { return end.seconds_since(start); }
};

}  // namespace titan
