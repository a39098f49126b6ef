// The device half of the profiler in a CUDA build: NVTX ranges (header-only NVTX3: the calls
// cost nothing until a tool such as Nsight Systems attaches) and CUDA event pairs, turned into
// intervals on the host's time base when the trace is written.
//
// Events are pooled: creating one costs microseconds, and a profiled step records two per span.
// Every event is created with timing on (cudaEventElapsedTime needs it) on the device current
// when it was first needed — one device per rank, as the trainer runs.
#include <nvtx3/nvToolsExt.h>

#include <mutex>
#include <vector>

#include "core/cuda/cuda_check.h"
#include "core/cuda/profiler_device.h"
#include "core/cuda/stream.h"

namespace titan::profiler::device {

namespace {

struct Slot {
  cudaEvent_t begin = nullptr;
  cudaEvent_t end = nullptr;
  int32_t stream = 0;
  bool ended = false;
};

struct State {
  std::mutex mutex;
  cudaEvent_t base = nullptr;  // the time base, recorded by start()
  bool based = false;
  std::vector<cudaEvent_t> pool;  // every event made so far
  size_t pool_used = 0;           // the first pool_used are in slots
  std::vector<Slot> slots;
  std::vector<cudaStream_t> streams;  // track index → stream
};

State& state() {
  static State s;
  return s;
}

// A pooled event, or null (the error cleared) when none can be made. Called with the lock held.
cudaEvent_t take_event(State& s) {
  if (s.pool_used == s.pool.size()) {
    cudaEvent_t event = nullptr;
    if (cudaEventCreateWithFlags(&event, cudaEventDefault) != cudaSuccess) {
      (void)cudaGetLastError();
      return nullptr;
    }
    s.pool.push_back(event);
  }
  return s.pool[s.pool_used++];
}

int32_t stream_index(State& s, cudaStream_t stream) {
  for (size_t i = 0; i < s.streams.size(); ++i) {
    if (s.streams[i] == stream) return static_cast<int32_t>(i);
  }
  s.streams.push_back(stream);
  return static_cast<int32_t>(s.streams.size() - 1);
}

// Milliseconds from the base to `event`, or a negative number when it cannot be had.
float since_base(const State& s, cudaEvent_t event) {
  float ms = 0;
  if (cudaEventElapsedTime(&ms, s.base, event) != cudaSuccess) {
    (void)cudaGetLastError();
    return -1;
  }
  return ms;
}

}  // namespace

void start() {
  State& s = state();
  std::lock_guard lock(s.mutex);
  s.slots.clear();
  s.streams.clear();
  s.pool_used = 0;
  s.based = false;
  if (s.base == nullptr) TT_CUDA_CHECK(cudaEventCreateWithFlags(&s.base, cudaEventDefault));
  TT_CUDA_CHECK(cudaEventRecord(s.base, cuda::current_stream()));
  TT_CUDA_CHECK(cudaEventSynchronize(s.base));
  s.based = true;
}

int32_t begin(const char* name) {
  nvtxRangePushA(name);
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (!s.based) return -1;
  cudaStream_t stream = nullptr;
  try {
    stream = cuda::current_stream();
  } catch (const Error&) {
    return -1;  // no usable device on this thread: the host span stands alone
  }
  Slot slot;
  slot.begin = take_event(s);
  slot.end = take_event(s);
  if (slot.begin == nullptr || slot.end == nullptr) return -1;
  if (cudaEventRecord(slot.begin, stream) != cudaSuccess) {
    (void)cudaGetLastError();
    return -1;
  }
  slot.stream = stream_index(s, stream);
  s.slots.push_back(slot);
  return static_cast<int32_t>(s.slots.size() - 1);
}

void end(int32_t slot, bool record) noexcept {
  State& s = state();
  {
    std::lock_guard lock(s.mutex);
    if (record && slot >= 0 && slot < static_cast<int32_t>(s.slots.size())) {
      Slot& span = s.slots[slot];
      if (cudaEventRecord(span.end, s.streams[span.stream]) == cudaSuccess) {
        span.ended = true;
      } else {
        (void)cudaGetLastError();
      }
    }
  }
  nvtxRangePop();
}

std::vector<Interval> finish() {
  State& s = state();
  std::lock_guard lock(s.mutex);
  std::vector<Interval> intervals(s.slots.size());
  for (size_t i = 0; i < s.slots.size(); ++i) {
    const Slot& span = s.slots[i];
    if (!s.based || !span.ended) continue;
    if (cudaEventSynchronize(span.end) != cudaSuccess) {
      (void)cudaGetLastError();
      continue;
    }
    const float begin_ms = since_base(s, span.begin), end_ms = since_base(s, span.end);
    if (begin_ms < 0 || end_ms < 0) continue;
    intervals[i] = {true, span.stream, begin_ms * 1000.0, end_ms * 1000.0};
  }
  s.slots.clear();
  s.streams.clear();
  s.pool_used = 0;
  s.based = false;
  return intervals;
}

}  // namespace titan::profiler::device
