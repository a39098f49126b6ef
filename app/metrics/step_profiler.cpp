#include "app/metrics/step_profiler.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <filesystem>

#include "app/output_folder.h"
#include "core/profiler.h"

namespace titan::app {

StepProfiler::StepProfiler(std::string folder, int64_t profile_freq, int64_t active,
                           int64_t last_step, int rank, bool on_cuda)
    : folder_(std::move(folder)),
      freq_(profile_freq),
      active_(active),
      last_step_(last_step),
      rank_(rank),
      on_cuda_(on_cuda) {
  ensure_writable_folder(folder_, "profiling.save_traces_folder");
}

bool StepProfiler::traces(int64_t step) const {
  // Position 1..freq in its window; the last `active` positions are traced.
  const int64_t position = (step - 1) % freq_ + 1;
  return position > freq_ - active_;
}

void StepProfiler::begin_step(int64_t step) {
  if (!traces(step) || recording_) return;
  profiler::start_recording(rank_, on_cuda_);
  recording_ = true;
}

void StepProfiler::end_step(int64_t step) {
  if (!recording_ || (step % freq_ != 0 && step != last_step_)) return;
  const std::filesystem::path dir =
      std::filesystem::path(folder_) / fmt::format("iteration_{}", step);
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  const std::string path = (dir / fmt::format("rank{}_trace.json", rank_)).string();
  profiler::stop_and_write(path);
  recording_ = false;
  if (rank_ == 0) spdlog::info("profiling: wrote the trace of step(s) up to {} to {}", step, path);
}

}  // namespace titan::app
