// Binary byte units for the figures the logs and reports print (1 MiB = 2^20 bytes).
#pragma once

namespace titan {

constexpr double kKiB = 1024.0;
constexpr double kMiB = 1024.0 * kKiB;
constexpr double kGiB = 1024.0 * kMiB;

}  // namespace titan
