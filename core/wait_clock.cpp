#include "core/wait_clock.h"

#include <utility>

#include "core/check.h"

namespace titan {

WaitClock::WaitClock() = default;
WaitClock::~WaitClock() = default;

void WaitClock::begin(const Device& device) {
  TT_CHECK(!open_, "WaitClock::begin inside another wait");
  open_ = true;
  device_ = device;
  start_ = DeviceMoment::now(device);
}

void WaitClock::end() {
  TT_CHECK(open_, "WaitClock::end without begin");
  open_ = false;
  waits_.push_back({std::move(start_), DeviceMoment::now(device_)});
}

void WaitClock::cancel() { open_ = false; }

double WaitClock::take_seconds() {
  double seconds = 0;
  // Waits on one stream finish in order, but async TP's side stream may finish before the
  // compute stream: read every one that has passed, keep the rest in their order.
  size_t kept = 0;
  for (DeviceInterval& wait : waits_) {
    if (!wait.passed()) {
      waits_[kept++] = std::move(wait);
      continue;
    }
    seconds += wait.seconds();
  }
  waits_.resize(kept);
  return seconds;
}

}  // namespace titan
