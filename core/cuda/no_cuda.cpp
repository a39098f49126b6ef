// A build without the CUDA backend (TITAN_CUDA=OFF): the device query finds no device, and
// every CUDA entry of core/cuda/backend.h says how to get one.
#include "core/check.h"
#include "core/cuda/backend.h"
#include "core/cuda/device_query.h"

namespace titan {

bool built_with_cuda() { return false; }

CudaQuery query_cuda_devices() {
  CudaQuery query;
  query.why_none = "this titan_train was built without the CUDA backend (TITAN_CUDA=OFF)";
  return query;
}

namespace cuda_backend {

namespace {
[[noreturn]] void no_backend(const char* what) {
  throw Error(detail::concat(what,
                             " of a CUDA tensor: this build has no CUDA backend "
                             "(configure with -DTITAN_CUDA=ON where nvcc is installed)"));
}
}  // namespace

Allocator* allocator() { return nullptr; }
int64_t allocator_cached_bytes() { return 0; }
void set_device(int) { no_backend("set_device"); }
void synchronize() { no_backend("synchronize"); }
void copy(const Tensor&, const Tensor&) { no_backend("copy"); }
void zero(const Tensor&) { no_backend("zero_"); }
void fill(const Tensor&, double) { no_backend("fill_"); }
void cast(const Tensor&, const Tensor&) { no_backend("cast"); }
void gemm(const Tensor&, bool, const Tensor&, bool, const Tensor&, double, double) {
  no_backend("gemm");
}
std::unique_ptr<StreamMark> mark_stream() { no_backend("mark_stream"); }
std::unique_ptr<StreamGraph> capture_graph(const std::string&, const std::function<void()>&) {
  no_backend("capture_graph");
}

}  // namespace cuda_backend

}  // namespace titan
