#include "core/wait_clock.h"

#include "core/check.h"
#include "core/cuda/backend.h"

namespace titan {

WaitClock::WaitClock() = default;
WaitClock::~WaitClock() = default;

void WaitClock::begin(const Device& device) {
  TT_CHECK(!open_, "WaitClock::begin inside another wait");
  open_ = true;
  on_cuda_ = device.is_cuda();
  if (on_cuda_) {
    device_start_ = cuda_backend::mark_stream();
  } else {
    host_start_ = Clock::now();
  }
}

void WaitClock::end() {
  TT_CHECK(open_, "WaitClock::end without begin");
  open_ = false;
  if (on_cuda_) {
    device_intervals_.emplace_back(std::move(device_start_), cuda_backend::mark_stream());
  } else {
    host_seconds_ += std::chrono::duration<double>(Clock::now() - host_start_).count();
  }
}

double WaitClock::take_seconds() {
  double seconds = host_seconds_;
  host_seconds_ = 0;
  // Intervals on one stream finish in order, but async TP's side stream may finish before the
  // compute stream: read every one that has run, keep the rest in their order.
  size_t kept = 0;
  for (auto& interval : device_intervals_) {
    if (interval.second->done()) {
      seconds += interval.second->seconds_since(*interval.first);
    } else {
      device_intervals_[kept++] = std::move(interval);
    }
  }
  device_intervals_.resize(kept);
  return seconds;
}

}  // namespace titan
