// What core/ asks of the CUDA backend. Implemented by core/cuda/*.cpp|cu in a CUDA build and
// by no_cuda.cpp (each call throws "built without the CUDA backend") otherwise, so that
// tensor.cpp, cast.cpp and gemm.cpp dispatch on the device without #ifdefs.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "core/allocator.h"
#include "core/tensor.h"

namespace titan::cuda_backend {

// The caching allocator, or null in a build without CUDA.
Allocator* allocator();
// Bytes the caching allocator keeps free for reuse (reserved, held by no tensor); 0 without CUDA.
int64_t allocator_cached_bytes();

// Makes device `index` this thread's current device (the trainer's one GPU per rank), and
// waits for everything issued on its current stream (for host timers around device work).
void set_device(int index);
void synchronize();

// dst (contiguous) = src, any pair of devices. src may be strided along its rows (a column
// block of a 2-D buffer); a copy to the host waits for the copy to finish.
void copy(const Tensor& dst, const Tensor& src);
void zero(const Tensor& t);                // contiguous, on CUDA
void fill(const Tensor& t, double value);  // contiguous, on CUDA; f32, bf16, i32, i64, u8
// dst = src converted (same shape, both contiguous on one CUDA device): f32, bf16, f64, i32.
void cast(const Tensor& dst, const Tensor& src);

// The CUDA half of core/gemm.h: C = alpha·op(A)·op(B) + beta·C through cuBLASLt, with fp32
// accumulation. A and B are bf16 (C bf16 or f32) or all f32 (exact fp32, no TF32).
void gemm(const Tensor& a, bool transpose_a, const Tensor& b, bool transpose_b, const Tensor& c,
          double alpha, double beta);

// A timing event recorded on the current stream (core/device_moment.h).
class StreamMark {
 public:
  virtual ~StreamMark() = default;
  // Whether the stream has run this mark (without blocking).
  virtual bool done() const = 0;
  // Seconds on the device from `earlier` (a mark on the same stream) to this mark; waits until
  // this mark has run.
  virtual double seconds_since(const StreamMark& earlier) const = 0;
};
std::unique_ptr<StreamMark> mark_stream();

// Work captured from the current stream once and replayed with one launch (core/cuda/
// cuda_graph.h says what the captured code may and may not do).
class StreamGraph {
 public:
  virtual ~StreamGraph() = default;
  virtual void replay() = 0;
};
// Captures what `body` issues on the current stream (body issues nothing to the device itself);
// `what` names the work in errors.
std::unique_ptr<StreamGraph> capture_graph(const std::string& what,
                                           const std::function<void()>& body);

}  // namespace titan::cuda_backend
