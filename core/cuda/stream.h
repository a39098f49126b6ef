// CUDA streams and events for the whole project.
//
// Every kernel, copy and library call is issued on `current_stream()`: by default one
// non-blocking stream per device, created on first use, so that the legacy default stream's
// implicit synchronisation never serialises the comm stream against compute. A side stream
// (the NCCL comm stream, async TP's ring) is made current for a scope with StreamGuard and
// ordered against compute with Events — the same model as torch.cuda.Stream / Event.
//
// For .cpp and .cu files alike (no fmt, no spdlog).
#pragma once

#include <cuda_runtime_api.h>

namespace titan::cuda {

// The device indices the per-device tables (streams, cuBLASLt handles) have room for.
constexpr int kMaxDevices = 64;

// The device this thread works on (cudaGetDevice), and making one current.
int current_device();
void set_device(int index);

// The stream this thread issues work on, for the current device.
cudaStream_t current_stream();
// Waits until everything issued on the current stream has finished.
void synchronize_stream();

// An owned non-blocking stream on the current device.
class Stream {
 public:
  Stream();
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  cudaStream_t get() const { return stream_; }

 private:
  cudaStream_t stream_ = nullptr;
};

// Makes `stream` this thread's current stream until the guard leaves scope.
class StreamGuard {
 public:
  explicit StreamGuard(cudaStream_t stream);
  ~StreamGuard();
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

 private:
  cudaStream_t previous_;
};

// An event, with timing enabled only when asked (timing events are slower to record).
class Event {
 public:
  explicit Event(bool timing = false);
  ~Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  void record(cudaStream_t stream = current_stream());
  // Work issued on `stream` after this call waits for the recorded work (no host blocking).
  void wait(cudaStream_t stream = current_stream()) const;
  void synchronize() const;
  // Whether the recorded work has finished, without blocking (cudaEventQuery; its "not ready"
  // is cleared from the thread's last error, so that a later launch check does not see it).
  bool query() const;
  // Milliseconds from `start` to this event; both recorded with timing enabled.
  float elapsed_ms_since(const Event& start) const;
  cudaEvent_t get() const { return event_; }

 private:
  cudaEvent_t event_ = nullptr;
};

}  // namespace titan::cuda
