// Where a tensor's bytes live: host memory or one CUDA device.
#pragma once

#include <ostream>
#include <string>
#include <string_view>

namespace titan {

enum class DeviceType : uint8_t { CPU, CUDA };

struct Device {
  DeviceType type = DeviceType::CPU;
  int index = 0;  // CUDA ordinal; always 0 for the CPU

  static constexpr Device cpu() { return {DeviceType::CPU, 0}; }
  static constexpr Device cuda(int index) { return {DeviceType::CUDA, index}; }

  bool is_cpu() const { return type == DeviceType::CPU; }
  bool is_cuda() const { return type == DeviceType::CUDA; }
  std::string str() const;  // "cpu", "cuda:0"

  friend bool operator==(const Device&, const Device&) = default;
};

// "cpu", "cuda" (device 0) or "cuda:N"; throws InputError otherwise.
Device parse_device(std::string_view text);

std::ostream& operator<<(std::ostream& os, const Device& device);

}  // namespace titan
