#include "core/cuda/cuda_check.h"
#include "core/cuda/device_query.h"

namespace titan {

bool built_with_cuda() { return true; }

CudaQuery query_cuda_devices() {
  CudaQuery query;
  TT_CUDA_CHECK(cudaRuntimeGetVersion(&query.runtime_version));
  // cudaDriverGetVersion reports 0 instead of failing when no driver is installed.
  TT_CUDA_CHECK(cudaDriverGetVersion(&query.driver_version));
  int count = 0;
  cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    query.why_none = std::string(cudaGetErrorName(status)) + ": " + cudaGetErrorString(status);
    cudaGetLastError();  // clear the sticky error so later calls start clean
    return query;
  }
  if (count == 0) {
    query.why_none = "the CUDA driver reports no devices (check CUDA_VISIBLE_DEVICES)";
    return query;
  }
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp prop{};
    TT_CUDA_CHECK(cudaGetDeviceProperties(&prop, i));
    query.devices.push_back({i, prop.name, prop.major, prop.minor,
                             static_cast<int64_t>(prop.totalGlobalMem), prop.multiProcessorCount});
  }
  return query;
}

}  // namespace titan
