// Which CUDA devices this process can use. Answers "none" (with the reason) on a machine
// without a GPU or driver, and in a build without the CUDA backend, so callers never need
// to know how the binary was built.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace titan {

struct CudaDeviceInfo {
  int index = 0;
  std::string name;  // "NVIDIA H100 80GB HBM3"
  int major = 0;     // compute capability, 9.0 for Hopper
  int minor = 0;
  int64_t total_bytes = 0;
  int multiprocessors = 0;
};

struct CudaQuery {
  std::vector<CudaDeviceInfo> devices;  // empty when no device can be used
  std::string why_none;                 // the reason when `devices` is empty
  int runtime_version = 0;              // 13000 for CUDA 13.0; 0 without the backend
  int driver_version = 0;               // 0 when no driver is installed
};

CudaQuery query_cuda_devices();

// True when this binary was built with the CUDA backend (TITAN_CUDA=ON).
bool built_with_cuda();

}  // namespace titan
