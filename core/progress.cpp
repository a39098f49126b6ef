#include "core/progress.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace titan {

namespace {

// snprintf into a string: core/ stays free of fmt, which its .cu files must not see.
template <typename... Args>
std::string printed(const char* format, Args... args) {
  char buffer[96];
  const int n = std::snprintf(buffer, sizeof buffer, format, args...);
  return std::string(buffer, n > 0 ? std::min(static_cast<size_t>(n), sizeof buffer - 1) : 0);
}

}  // namespace

std::string format_duration(double seconds) {
  if (!(seconds >= 0) || !std::isfinite(seconds)) return "?";
  if (seconds < 10) return printed("%.1fs", seconds);
  const auto s = static_cast<long long>(seconds);
  if (s < 60) return printed("%llds", s);
  if (s < 3600) return printed("%lldm%02llds", s / 60, s % 60);
  if (s < 86400) return printed("%lldh%02lldm", s / 3600, s % 3600 / 60);
  return printed("%lldd%02lldh", s / 86400, s % 86400 / 3600);
}

std::string format_step_progress(int64_t step, int64_t last_step) {
  const int width = std::snprintf(nullptr, 0, "%lld", static_cast<long long>(last_step));
  const double percent = last_step > 0 ? 100.0 * static_cast<double>(step) /
                                             static_cast<double>(last_step)
                                       : 0.0;
  return printed("step %*lld/%lld (%.0f%%)", width, static_cast<long long>(step),
                 static_cast<long long>(last_step), std::floor(percent));
}

}  // namespace titan
