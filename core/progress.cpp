#include "app/progress.h"

#include <fmt/format.h>

#include <cmath>

namespace titan::app {

std::string format_duration(double seconds) {
  if (!(seconds >= 0) || !std::isfinite(seconds)) return "?";
  if (seconds < 10) return fmt::format("{:.1f}s", seconds);
  auto s = static_cast<int64_t>(seconds);
  if (s < 60) return fmt::format("{}s", s);
  if (s < 3600) return fmt::format("{}m{:02}s", s / 60, s % 60);
  if (s < 86400) return fmt::format("{}h{:02}m", s / 3600, s % 3600 / 60);
  return fmt::format("{}d{:02}h", s / 86400, s % 86400 / 3600);
}

std::string format_step_progress(int64_t step, int64_t last_step) {
  const auto width = fmt::formatted_size("{}", last_step);
  const double percent = last_step > 0 ? 100.0 * static_cast<double>(step) /
                                             static_cast<double>(last_step)
                                       : 0.0;
  return fmt::format("step {:>{}}/{} ({:.0f}%)", step, width, last_step, std::floor(percent));
}

}  // namespace titan::app
