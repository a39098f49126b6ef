#include "core/wait_clock.h"

#include "core/check.h"
#include "core/cuda/backend.h"

namespace titan {

namespace {

// A mark on the current stream, or null when CUDA refuses one.
std::unique_ptr<cuda_backend::StreamMark> try_mark_stream() noexcept {
  try {
    return cuda_backend::mark_stream();
  } catch (const std::exception&) {
    return nullptr;
  }
}

}  // namespace

WaitClock::WaitClock() = default;
WaitClock::~WaitClock() = default;

void WaitClock::begin(const Device& device) {
  TT_CHECK(!open_, "WaitClock::begin inside another wait");
  open_ = true;
  on_cuda_ = device.is_cuda();
  if (on_cuda_) {
    device_start_ = try_mark_stream();
  } else {
    host_start_ = Clock::now();
  }
}

void WaitClock::end() {
  TT_CHECK(open_, "WaitClock::end without begin");
  open_ = false;
  if (on_cuda_) {
    std::unique_ptr<cuda_backend::StreamMark> after = device_start_ ? try_mark_stream() : nullptr;
    if (after) device_intervals_.emplace_back(std::move(device_start_), std::move(after));
    device_start_.reset();
  } else {
    host_seconds_ += std::chrono::duration<double>(Clock::now() - host_start_).count();
  }
}

void WaitClock::cancel() {
  open_ = false;
  device_start_.reset();
}

double WaitClock::take_seconds() {
  double seconds = host_seconds_;
  host_seconds_ = 0;
  // Intervals on one stream finish in order, but async TP's side stream may finish before the
  // compute stream: read every one that has run, keep the rest in their order.
  size_t kept = 0;
  for (auto& interval : device_intervals_) {
    try {
      if (!interval.second->done()) {
        device_intervals_[kept++] = std::move(interval);
        continue;
      }
      seconds += interval.second->seconds_since(*interval.first);
    } catch (const std::exception&) {
      // Dropped: see begin().
    }
  }
  device_intervals_.resize(kept);
  return seconds;
}

}  // namespace titan
