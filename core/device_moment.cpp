#include "core/device_moment.h"

#include <exception>

#include "core/cuda/backend.h"

namespace titan {

DeviceMoment::DeviceMoment() = default;
DeviceMoment::~DeviceMoment() = default;
DeviceMoment::DeviceMoment(DeviceMoment&&) noexcept = default;
DeviceMoment& DeviceMoment::operator=(DeviceMoment&&) noexcept = default;

DeviceMoment DeviceMoment::now(const Device& device) {
  DeviceMoment moment;
  moment.on_cuda_ = device.is_cuda();
  if (!moment.on_cuda_) {
    moment.host_ = std::chrono::steady_clock::now();
    return moment;
  }
  try {
    moment.mark_ = cuda_backend::mark_stream();
  } catch (const std::exception&) {
    // Left empty: see now().
  }
  return moment;
}

bool DeviceMoment::passed() const {
  if (!on_cuda_ || !mark_) return true;
  try {
    return mark_->done();
  } catch (const std::exception&) {
    return true;  // reads 0 in seconds_since
  }
}

double DeviceMoment::seconds_since(const DeviceMoment& earlier) const {
  if (!on_cuda_ && !earlier.on_cuda_) {
    return std::chrono::duration<double>(host_ - earlier.host_).count();
  }
  if (!mark_ || !earlier.mark_) return 0;
  try {
    return mark_->seconds_since(*earlier.mark_);
  } catch (const std::exception&) {
    return 0;
  }
}

}  // namespace titan
