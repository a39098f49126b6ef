// The devices a plan can be made for (titan_train --plan-device): each one's memory, dense
// bf16 and FP8 peak rates, memory bandwidth and links, every figure beside its source, in one
// table (devices.cpp). A plan's time is these peaks times the efficiencies measured on the
// H100 (step_time.h); its verdict is its memory against `memory_bytes`.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace titan::app::plan {

struct DeviceSpec {
  std::string name;         // the --plan-device value: "h100"
  std::string description;  // "NVIDIA H100 SXM5 80GB HBM3"
  bool cuda = true;
  double memory_bytes = 0;    // what the trainer checks against: CUDA's totalGlobalMem
  double bf16_tflops = 0;     // dense
  double fp8_tflops = 0;      // dense
  double hbm_gbs = 0;         // memory bandwidth, GB/s
  double intra_node_gbs = 0;  // per GPU, each direction (NVLink)
  double inter_node_gbs = 0;  // per GPU, each direction (the network)
  int devices_per_node = 8;
  std::string source;  // where each figure comes from
};

// The table, in --plan-device's order.
const std::vector<DeviceSpec>& device_table();

// "h100", "h200", "b200" or "cpu" (this machine: its physical memory, as the trainer checks
// it). InputError naming `key` and the names otherwise.
DeviceSpec device_spec(std::string_view name, std::string_view key);

}  // namespace titan::app::plan
