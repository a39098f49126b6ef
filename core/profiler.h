// Profiler spans: the phases of a step, recorded for chosen steps and written as a Chrome trace
// (JSON, opens in Perfetto and chrome://tracing), one file per rank.
//
// Code marks a phase with a Span on the stack: `profiler::Span span("forward", "model");`.
// When the rank is not recording (every step but the profiled ones, and always when
// profiling.enable_profiling is off) a Span is one relaxed atomic load and nothing else — the
// constructors and the destructor are inline, and nothing is allocated — so spans stay in the
// code for good. When recording, a Span notes its begin and end on the host clock
// (steady_clock, µs since start_recording), on its thread's track; spans nest as scopes do. On
// CUDA it also pushes an NVTX range (Nsight Systems shows the same names) and records a CUDA
// event pair on the current stream (core/cuda/stream.h), written at the end as a span on that
// stream's own track ("cuda stream"): device time, where the host track shows launch time.
//
// Names are string literals or built only when recording (the std::string overload through
// TT_PROFILE_SPAN): a Span that is off never formats a string. Categories in use: "model",
// "gemm", "attention", "loss", "comm", "fsdp", "ddp", "optimizer", "data", "checkpoint" (and
// the trainer's own, "step").
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>

namespace titan::profiler {

namespace detail {
extern std::atomic<bool> g_recording;
}

// Whether this process records spans now.
inline bool recording() { return detail::g_recording.load(std::memory_order_relaxed); }

class Span {
 public:
  // `name` and `category` must outlive the recording (string literals). A null name records
  // nothing (TT_PROFILE_SPAN's "off" branch).
  Span(const char* name, const char* category) {
    if (recording() && name != nullptr) begin(name, std::string(), category, {}, -1);
  }
  // For names built at run time ("block.3.forward"): call only inside `if (recording())`, or
  // use TT_PROFILE_SPAN, which builds the name only when recording.
  Span(std::string name, const char* category) {
    if (recording()) begin(nullptr, std::move(name), category, {}, -1);
  }
  // A collective: its mesh dims ("dp_shard", "tp", "dp_replicate×dp_shard") and its payload
  // in bytes — this rank's input buffer, what it contributes; the traffic on the wire follows
  // from it and the algorithm — shown as the span's args. `dims` is copied only when recording.
  Span(const char* name, const char* category, std::string_view dims, int64_t bytes) {
    if (recording() && name != nullptr) begin(name, std::string(), category, dims, bytes);
  }
  ~Span() {
    if (index_ >= 0) end();
  }
  Span(const Span&) = delete;
  Span& operator=(const Span&) = delete;

 private:
  // Out of line: reached only while recording.
  void begin(const char* literal, std::string owned, const char* category, std::string_view dims,
             int64_t bytes);
  void end() noexcept;

  int64_t index_ = -1;       // this span's slot in the recording; -1 when not recording
  uint32_t generation_ = 0;  // which recording the slot belongs to
  int32_t device_ = -1;      // its CUDA event pair and NVTX range; -1 when none
};

// Starts recording on this process (clearing what was recorded before). `rank` names the
// process in the trace; `on_cuda` adds the device tracks (CUDA events on the current stream
// of each span) and NVTX ranges — Error in a build without the CUDA backend.
void start_recording(int rank, bool on_cuda);

// Stops recording and writes the Chrome trace JSON of everything recorded since
// start_recording to `path` (its folder must exist). Waits for the device spans' events.
// A span still open is written as ending here, with args {"unfinished": true}.
// Throws Error naming the path if it cannot be written.
void stop_and_write(const std::string& path);

}  // namespace titan::profiler

// A span for a run-time name, formatted only when recording: TT_PROFILE_SPAN(fmt-free string
// expression, "category"). The expression is evaluated only when recording; it may yield a
// std::string or a string literal (never a pointer into a temporary).
#define TT_PROFILE_CONCAT_(a, b) a##b
#define TT_PROFILE_CONCAT(a, b) TT_PROFILE_CONCAT_(a, b)
#define TT_PROFILE_SPAN(name_expr, category)                                        \
  ::titan::profiler::Span TT_PROFILE_CONCAT(tt_profile_span_, __LINE__) =           \
      ::titan::profiler::recording() ? ::titan::profiler::Span(name_expr, category) \
                                     : ::titan::profiler::Span(nullptr, category)
