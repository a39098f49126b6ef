#include "app/plan/devices.h"

#include <unistd.h>

#include "core/byte_units.h"
#include "core/check.h"

namespace titan::app::plan {

namespace {

double physical_memory_bytes() {
  return static_cast<double>(sysconf(_SC_PHYS_PAGES)) * static_cast<double>(sysconf(_SC_PAGE_SIZE));
}

}  // namespace

const std::vector<DeviceSpec>& device_table() {
  // Memory is CUDA's totalGlobalMem (what nvidia-smi lists as memory.total and the trainer's
  // check reads), not the marketing figure. Rates are dense (the datasheets quote 2:4 sparse,
  // twice these). Links are per GPU and direction.
  static const std::vector<DeviceSpec> table = {
      {"h100", "NVIDIA H100 SXM5 80GB HBM3", true, 81559 * kMiB, 989.4, 1978.9, 3350, 450, 50, 8,
       "memory 81559 MiB: nvidia-smi memory.total of an H100 80GB HBM3; bf16 989.4 and FP8 "
       "1978.9 TFLOP/s dense, 3.35 TB/s HBM3, NVLink 4 900 GB/s (450 each way): NVIDIA H100 "
       "datasheet (nvidia.com/en-us/data-center/h100); 400 Gb/s ConnectX-7 per GPU: NVIDIA DGX "
       "H100 user guide"},
      {"h200", "NVIDIA H200 SXM 141GB HBM3e", true, 143771 * kMiB, 989.4, 1978.9, 4800, 450, 50, 8,
       "memory 143771 MiB: nvidia-smi memory.total of an H200; bf16 989.4 and FP8 1978.9 TFLOP/s "
       "dense, 4.8 TB/s HBM3e, NVLink 4 900 GB/s: NVIDIA H200 datasheet "
       "(nvidia.com/en-us/data-center/h200); 400 Gb/s per GPU: DGX H200"},
      {"b200", "NVIDIA B200 (HGX, 1000 W) 180GB HBM3e", true, 183359 * kMiB, 2250, 4500, 8000, 900,
       50, 8,
       "memory 183359 MiB: nvidia-smi memory.total of a B200; bf16 2250 and FP8 4500 TFLOP/s "
       "dense at 1000 W: NVIDIA Blackwell architecture technical brief (HGX B200 table); 8 TB/s "
       "HBM3e, NVLink 5 1.8 TB/s (900 each way): NVIDIA HGX B200 datasheet "
       "(nvidia.com/en-us/data-center/hgx); 400 Gb/s per GPU: DGX B200"},
      {"cpu", "this machine's CPU (training.device cpu)", false, 0, 0.084, 0.084, 5, 5, 5, 1,
       "memory: this machine's physical memory (sysconf), as the trainer checks it; 84 GFLOP/s: "
       "the debug model's GEMM rate on the 2-core VM (docs/performance.md, run 3); 5 GB/s for "
       "element-wise work and for MPI between ranks: assumed, not measured"},
  };
  return table;
}

DeviceSpec device_spec(std::string_view name, std::string_view key) {
  std::string names;
  for (const DeviceSpec& d : device_table()) {
    if (d.name == name) {
      DeviceSpec spec = d;
      if (!spec.cuda) spec.memory_bytes = physical_memory_bytes();
      return spec;
    }
    names += (names.empty() ? "" : ", ") + d.name;
  }
  input_error(key, ": unknown device '", name, "'; use one of ", names);
}

}  // namespace titan::app::plan
