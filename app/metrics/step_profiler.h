// profiling.enable_profiling: which steps are traced, and where their traces go.
//
// torchtitan's schedule: in every window of profile_freq steps, the last profiler_active steps
// are traced (profile_freq 10, active 1: steps 10, 20, …), and the profiler_warmup steps before
// them are profiled too, their events discarded when the first traced step starts, so that the
// traced steps begin with the profiler already running (its buffers grown, on CUDA its time
// base set and its events pooled). Each traced window is written by every rank when its last
// step ends:
//
//   <job.dump_folder>/<save_traces_folder>/iteration_<step>/rank<R>_trace.json
//
// (Chrome trace JSON: Perfetto, chrome://tracing; core/profiler.h records the spans).
#pragma once

#include <cstdint>
#include <string>

namespace titan::app {

struct ProfileSchedule {
  int64_t freq = 10;      // steps per window
  int64_t warmup = 3;     // profiled and discarded, before the traced ones
  int64_t active = 1;     // traced: the last steps of each window
  int64_t last_step = 0;  // the run's: a window it cuts short is written when it ends
};

class StepProfiler {
 public:
  // `folder` is created and checked writable now: InputError before training otherwise.
  StepProfiler(std::string folder, ProfileSchedule schedule, int rank, bool on_cuda);

  // Where `step` falls in its window.
  enum class Phase { Idle, Warmup, Traced };
  Phase phase(int64_t step) const;
  bool traces(int64_t step) const { return phase(step) == Phase::Traced; }

  // Around each step: starts recording at a window's first warmup step (or a resumed run's
  // first step inside one), starts again, dropping the warmup's events, at its first traced
  // step, and writes the trace when its last step has ended.
  void begin_step(int64_t step);
  void end_step(int64_t step);

 private:
  std::string folder_;
  ProfileSchedule schedule_;
  int rank_;
  bool on_cuda_;
  bool recording_ = false;
  bool warming_up_ = false;  // what is recorded now is warmup, to drop
};

}  // namespace titan::app
