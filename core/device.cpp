#include "core/device.h"

#include <charconv>

#include "core/check.h"
#include "core/enum_names.h"

namespace titan {

std::string Device::str() const {
  if (is_cpu()) return "cpu";
  return index_chosen() ? "cuda:" + std::to_string(index) : std::string("cuda");
}

Device parse_device_setting(std::string_view text, std::string_view key) {
  if (text == "cpu") return Device::cpu();
  if (text == "cuda") return Device::cuda(Device::kUnchosen);
  if (text.starts_with("cuda:")) {
    std::string_view digits = text.substr(5);
    int index = -1;
    auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), index);
    if (ec == std::errc() && end == digits.data() + digits.size() && index >= 0) {
      return Device::cuda(index);
    }
  }
  refuse_unknown_name(key, "device", text, kDeviceForms);
}

Device parse_device(std::string_view text) {
  Device device = parse_device_setting(text);
  if (!device.index_chosen()) device.index = 0;
  return device;
}

std::ostream& operator<<(std::ostream& os, const Device& device) { return os << device.str(); }

}  // namespace titan
