// The device query of a build without the CUDA backend (TITAN_CUDA=OFF): never any device.
#include "core/cuda/device_query.h"

namespace titan {

bool built_with_cuda() { return false; }

CudaQuery query_cuda_devices() {
  CudaQuery query;
  query.why_none = "this titan_train was built without the CUDA backend (TITAN_CUDA=OFF)";
  return query;
}

}  // namespace titan
