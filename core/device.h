// Where a tensor's bytes live: host memory or one CUDA device.
#pragma once

#include <ostream>
#include <string>
#include <string_view>

namespace titan {

enum class DeviceType : uint8_t { CPU, CUDA };

struct Device {
  // The index of "cuda" written without one, in a setting: any GPU, for the caller to choose
  // (titan_train: the node-local rank's). A tensor's device always has a chosen index.
  static constexpr int kUnchosen = -1;

  DeviceType type = DeviceType::CPU;
  int index = 0;  // CUDA ordinal; always 0 for the CPU

  static constexpr Device cpu() { return {DeviceType::CPU, 0}; }
  static constexpr Device cuda(int index) { return {DeviceType::CUDA, index}; }

  bool is_cpu() const { return type == DeviceType::CPU; }
  bool is_cuda() const { return type == DeviceType::CUDA; }
  bool index_chosen() const { return index != kUnchosen; }
  std::string str() const;  // "cpu", "cuda:0"; "cuda" when the index is not chosen

  friend bool operator==(const Device&, const Device&) = default;
};

// The ways a device is written: the names its parsers accept and their errors list.
inline constexpr std::string_view kDeviceForms[] = {"cpu", "cuda", "cuda:N"};

// "cpu", "cuda" (device 0) or "cuda:N"; throws InputError otherwise.
Device parse_device(std::string_view text);

// The same for a setting, where "cuda" alone leaves the index unchosen (Device::kUnchosen).
// InputError "<key>: unknown device '<text>'; use cpu, cuda or cuda:N" (key from the caller).
Device parse_device_setting(std::string_view text, std::string_view key = {});

std::ostream& operator<<(std::ostream& os, const Device& device);

}  // namespace titan
