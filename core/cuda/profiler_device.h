// The device half of the profiler (core/profiler.h): NVTX ranges and CUDA event pairs around
// spans. Implemented by profiler_cuda.cpp in a CUDA build and by profiler_no_cuda.cpp
// otherwise, so that core/profiler.cpp carries no #ifdef and no CUDA header.
//
// Every function is called by core/profiler.cpp only, while recording with on_cuda. None of
// them throws except start(): a failing event record drops that span's device interval (a
// profile must never stop a run), and the rest of the trace is written.
#pragma once

#include <cstdint>
#include <vector>

namespace titan::profiler::device {

// Records the time base — an event on the current stream, waited for, so that its device
// time is the host's "now" as closely as one launch allows — and forgets earlier spans.
void start();

// Pushes an NVTX range named `name` and records a begin event on this thread's current stream.
// Returns the span's slot (or -1 when the event could not be recorded; the range is pushed).
int32_t begin(const char* name);

// Records the end event of `slot` on the stream of its begin (when `record` and slot >= 0),
// and pops this thread's innermost NVTX range.
void end(int32_t slot, bool record) noexcept;

struct Interval {
  bool valid = false;   // both events recorded and completed
  int32_t stream = 0;   // 0, 1, …: the streams in the order spans first used them
  double begin_us = 0;  // since start()
  double end_us = 0;
};

// Waits for every recorded event and returns the intervals by slot. Forgets them.
std::vector<Interval> finish();

}  // namespace titan::profiler::device
