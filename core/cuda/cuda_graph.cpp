#include "core/cuda/cuda_graph.h"

#include <exception>

#include "core/cuda/backend.h"
#include "core/cuda/caching_allocator.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/stream.h"

namespace titan::cuda {

namespace {

// What a failed capture usually means, for the error's end.
constexpr const char* kCaptureHint =
    "an op in it synchronized, copied to or from the host, or ran on another stream; a CUDA graph "
    "cannot record that (run without the graph, e.g. titan_generate --cuda-graph off)";

// Ends the capture under way on `stream` after a failure and drops what it recorded.
void abandon_capture(cudaStream_t stream) {
  cudaGraph_t partial = nullptr;
  (void)cudaStreamEndCapture(stream, &partial);
  if (partial != nullptr) (void)cudaGraphDestroy(partial);
  (void)cudaGetLastError();  // the capture's error is reported by the caller's exception
}

}  // namespace

CudaGraph::CudaGraph(const std::string& what, const std::function<void()>& body)
    : what_(what), stream_(current_stream()) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  TT_CUDA_CHECK(cudaStreamIsCapturing(stream_, &status));
  TT_CHECK(status == cudaStreamCaptureStatusNone, "CUDA graph of ", what_,
           ": the current stream is already being captured; graphs do not nest");
  pool_ = begin_graph_pool();
  cudaGraph_t graph = nullptr;
  try {
    TT_CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeRelaxed));
    try {
      body();
    } catch (...) {
      abandon_capture(stream_);
      throw;
    }
    TT_CUDA_CHECK(cudaStreamEndCapture(stream_, &graph));
    end_graph_pool();
    TT_CUDA_CHECK(cudaGraphInstantiate(&exec_, graph, 0));
    TT_CUDA_CHECK(cudaGraphDestroy(graph));
  } catch (const std::exception& e) {
    if (graph != nullptr) (void)cudaGraphDestroy(graph);
    end_graph_pool();
    release_graph_pool(pool_);
    throw Error(detail::concat("capturing a CUDA graph of ", what_, " failed: ", e.what(), "; ",
                               kCaptureHint));
  }
}

CudaGraph::~CudaGraph() {
  // Replays may still run on the graph's blocks; the destructor must not throw.
  (void)cudaStreamSynchronize(stream_);
  if (exec_ != nullptr) (void)cudaGraphExecDestroy(exec_);
  (void)cudaGetLastError();
  release_graph_pool(pool_);
}

void CudaGraph::replay() {
  TT_CHECK(current_stream() == stream_, "CUDA graph of ", what_,
           ": replayed on another stream than the one it was captured on; make that stream "
           "current (StreamGuard) first");
  TT_CUDA_CHECK(cudaGraphLaunch(exec_, stream_));
}

}  // namespace titan::cuda

namespace titan::cuda_backend {

namespace {

class CapturedGraph final : public StreamGraph {
 public:
  CapturedGraph(const std::string& what, const std::function<void()>& body) : graph_(what, body) {}
  void replay() override { graph_.replay(); }

 private:
  cuda::CudaGraph graph_;
};

}  // namespace

std::unique_ptr<StreamGraph> capture_graph(const std::string& what,
                                           const std::function<void()>& body) {
  return std::make_unique<CapturedGraph>(what, body);
}

}  // namespace titan::cuda_backend
