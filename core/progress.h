// How far a run is, as a person reads it: durations and the step counter of a progress line.
// In core/ because every executable that reports progress (titan_train's metrics line,
// titan_tokenize's progress lines) formats it the same way.
#pragma once

#include <cstdint>
#include <string>

namespace titan {

// "0.4s", "42s", "3m07s", "2h05m", "3d04h": two units at most, rounded down.
std::string format_duration(double seconds);

// "step 10/200 (5%)"; the step field is as wide as the last step, so lines align.
std::string format_step_progress(int64_t step, int64_t last_step);

}  // namespace titan
