#include "app/metrics/step_profiler.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <filesystem>

#include "app/output_folder.h"
#include "core/profiler.h"

namespace titan::app {

StepProfiler::StepProfiler(std::string folder, ProfileSchedule schedule, int rank, bool on_cuda)
    : folder_(std::move(folder)), schedule_(schedule), rank_(rank), on_cuda_(on_cuda) {
  ensure_writable_folder(folder_, "profiling.save_traces_folder");
}

StepProfiler::Phase StepProfiler::phase(int64_t step) const {
  // Position 1..freq in its window: the last `active` positions are traced, the `warmup`
  // before them warm up.
  const int64_t position = (step - 1) % schedule_.freq + 1;
  const int64_t first_traced = schedule_.freq - schedule_.active + 1;
  if (position >= first_traced) return Phase::Traced;
  if (position >= first_traced - schedule_.warmup) return Phase::Warmup;
  return Phase::Idle;
}

void StepProfiler::begin_step(int64_t step) {
  const Phase now = phase(step);
  if (now == Phase::Idle) return;
  if (recording_ && !(warming_up_ && now == Phase::Traced)) return;
  // Starting again clears what the warmup recorded (core/profiler.h).
  profiler::start_recording(rank_, on_cuda_);
  recording_ = true;
  warming_up_ = now == Phase::Warmup;
}

void StepProfiler::end_step(int64_t step) {
  if (!recording_ || warming_up_ || (step % schedule_.freq != 0 && step != schedule_.last_step)) {
    return;
  }
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
