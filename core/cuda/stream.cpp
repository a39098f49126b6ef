#include "core/cuda/stream.h"

#include <mutex>
#include <vector>

#include "core/cuda/cuda_check.h"

namespace titan::cuda {

namespace {

// The per-device default streams live as long as the process: kernels may still be queued on
// them while static destructors run, so they are never destroyed.
cudaStream_t default_stream(int device) {
  static std::mutex mutex;
  static cudaStream_t streams[kMaxDevices] = {};
  std::lock_guard lock(mutex);
  TT_CHECK(device >= 0 && device < kMaxDevices, "CUDA device index ", device, " out of range");
  if (streams[device] == nullptr) {
    TT_CUDA_CHECK(cudaStreamCreateWithFlags(&streams[device], cudaStreamNonBlocking));
  }
  return streams[device];
}

// A StreamGuard's stream for this thread, or null for the device's default stream.
thread_local cudaStream_t guarded_stream = nullptr;

}  // namespace

int current_device() {
  int device = 0;
  TT_CUDA_CHECK(cudaGetDevice(&device));
  return device;
}

void set_device(int index) { TT_CUDA_CHECK(cudaSetDevice(index)); }

cudaStream_t current_stream() {
  return guarded_stream != nullptr ? guarded_stream : default_stream(current_device());
}

void synchronize_stream() { TT_CUDA_CHECK(cudaStreamSynchronize(current_stream())); }

Stream::Stream() { TT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking)); }
Stream::~Stream() { cudaStreamDestroy(stream_); }

StreamGuard::StreamGuard(cudaStream_t stream) : previous_(guarded_stream) {
  guarded_stream = stream;
}
StreamGuard::~StreamGuard() { guarded_stream = previous_; }

Event::Event(bool timing) {
  TT_CUDA_CHECK(
      cudaEventCreateWithFlags(&event_, timing ? cudaEventDefault : cudaEventDisableTiming));
}
Event::~Event() { cudaEventDestroy(event_); }

void Event::record(cudaStream_t stream) { TT_CUDA_CHECK(cudaEventRecord(event_, stream)); }
void Event::wait(cudaStream_t stream) const {
  TT_CUDA_CHECK(cudaStreamWaitEvent(stream, event_, 0));
}
void Event::synchronize() const { TT_CUDA_CHECK(cudaEventSynchronize(event_)); }
bool Event::query() const {
  const cudaError_t state = cudaEventQuery(event_);
  if (state == cudaErrorNotReady) {
    (void)cudaGetLastError();
    return false;
  }
  TT_CUDA_CHECK(state);
  return true;
}
float Event::elapsed_ms_since(const Event& start) const {
  float ms = 0;
  TT_CUDA_CHECK(cudaEventElapsedTime(&ms, start.event_, event_));
  return ms;
}

}  // namespace titan::cuda
