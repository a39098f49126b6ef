#include "core/device.h"

#include <charconv>

#include "core/check.h"

namespace titan {

std::string Device::str() const {
  return is_cpu() ? std::string("cpu") : "cuda:" + std::to_string(index);
}

Device parse_device(std::string_view text) {
  if (text == "cpu") return Device::cpu();
  if (text == "cuda") return Device::cuda(0);
  if (text.starts_with("cuda:")) {
    std::string_view digits = text.substr(5);
    int index = -1;
    auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), index);
    if (ec == std::errc() && end == digits.data() + digits.size() && index >= 0) {
      return Device::cuda(index);
    }
  }
  input_error("unknown device '", text, "'; use cpu, cuda or cuda:N");
}

std::ostream& operator<<(std::ostream& os, const Device& device) { return os << device.str(); }

}  // namespace titan
