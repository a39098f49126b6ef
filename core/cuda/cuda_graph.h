// A CUDA graph of the work one function issues on the current stream, captured once and replayed
// with one launch: for a step that is the same kernels on the same buffers every time, where
// launching each kernel from the host costs more than the kernel (text generation's decode step,
// docs/generation.md#cuda-graph).
//
// What a capture needs of the code it runs: everything on the current stream (another stream
// only through events, which joins it to the capture); no synchronization (a stream or device
// sync, a copy to or from the host — core's copies to the host wait for them — or pageable host
// memory); and no value that changes between replays baked into a launch (a kernel argument or a
// grid computed on the host from per-call data): such values must be read from device memory
// that the caller updates before each replay. The capture runs in relaxed mode so that the
// caching allocator may cudaMalloc for it; its blocks belong to the graph until it is destroyed
// (caching_allocator.h). cuBLASLt's workspace is one buffer per device for the whole process
// (cublaslt.h), so the captured GEMMs' workspace pointer stays valid.
//
// Replay on the stream of the capture only: the graph's pool was cached for that stream.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>
#include <string>

namespace titan::cuda {

class CudaGraph {
 public:
  // Captures what `body` issues on the current stream; `what` names it in errors ("the decode
  // step of 3 rows"). body runs once, issuing nothing to the device: its kernels first run on
  // the first replay(). Throws an Error naming `what` and the failed call when the capture
  // cannot be made.
  CudaGraph(const std::string& what, const std::function<void()>& body);
  // Waits for the replays to finish, then frees the graph and hands its blocks back.
  ~CudaGraph();
  CudaGraph(const CudaGraph&) = delete;
  CudaGraph& operator=(const CudaGraph&) = delete;

  // One launch of the whole graph on the current stream (which must be the capture's).
  void replay();
  const std::string& what() const { return what_; }

 private:
  std::string what_;
  cudaStream_t stream_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
  uint64_t pool_ = 0;
};

}  // namespace titan::cuda
