// profiling.enable_profiling: which steps are traced, and where their traces go.
//
// torchtitan's schedule: in every window of profile_freq steps, the last profiler_active steps
// are traced (profile_freq 10, active 1: steps 10, 20, …), after profiler_warmup steps that
// torch's profiler runs untraced to warm up. titan_train's spans need no warm-up, so warmup
// only has to fit (warmup + active ≤ profile_freq) for torchtitan configs to carry over.
// Each traced window is written by every rank when its last step ends:
//
//   <job.dump_folder>/<save_traces_folder>/iteration_<step>/rank<R>_trace.json
//
// (Chrome trace JSON: Perfetto, chrome://tracing; core/profiler.h records the spans).
#pragma once

#include <cstdint>
#include <string>

namespace titan::app {

class StepProfiler {
 public:
  // `folder` is created and checked writable now: InputError before training otherwise.
  // A window cut short by the run's end (`last_step`) is written when that step ends.
  StepProfiler(std::string folder, int64_t profile_freq, int64_t active, int64_t last_step, int rank,
               bool on_cuda);

  bool traces(int64_t step) const;
  // Around each step: starts recording at a traced window's first step (or a resumed run's
  // first step inside one), writes the trace when its last step has ended.
  void begin_step(int64_t step);
  void end_step(int64_t step);

 private:
  std::string folder_;
  int64_t freq_;
  int64_t active_;
  int64_t last_step_;
  int rank_;
  bool on_cuda_;
  bool recording_ = false;
};

}  // namespace titan::app
