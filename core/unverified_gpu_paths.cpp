#include "core/unverified_gpu_paths.h"

#include <atomic>
#include <cstdint>

namespace titan {

namespace {

// One bit per path. Written at start-up, read by the ops on any thread.
std::atomic<uint32_t> allowed_paths{0};

uint32_t bit(UnverifiedGpuPath path) { return 1u << static_cast<unsigned>(path); }

}  // namespace

std::vector<UnverifiedGpuPath> parse_unverified_gpu_paths(std::span<const std::string> names,
                                                          const std::string& key) {
  std::vector<UnverifiedGpuPath> paths;
  for (const std::string& name : names) {
    if (name == "all") {
      for (const auto& entry : kUnverifiedGpuPaths.entries()) paths.push_back(entry.value);
      continue;
    }
    const std::optional<UnverifiedGpuPath> path = kUnverifiedGpuPaths.find(name);
    if (!path) {
      std::vector<std::string_view> allowed = kUnverifiedGpuPaths.names();
      allowed.push_back("all");
      refuse_unknown_name(key, kUnverifiedGpuPaths.noun(), name, allowed);
    }
    paths.push_back(*path);
  }
  return paths;
}

void allow_unverified_gpu_paths(std::span<const UnverifiedGpuPath> paths) {
  uint32_t bits = 0;
  for (UnverifiedGpuPath path : paths) bits |= bit(path);
  allowed_paths.store(bits);
}

void allow_every_unverified_gpu_path() {
  uint32_t bits = 0;
  for (const auto& entry : kUnverifiedGpuPaths.entries()) bits |= bit(entry.value);
  allowed_paths.store(bits);
}

bool unverified_gpu_path_allowed(UnverifiedGpuPath path) {
  return (allowed_paths.load(std::memory_order_relaxed) & bit(path)) != 0;
}

std::string allowed_unverified_gpu_paths_text() {
  std::string text;
  for (const auto& entry : kUnverifiedGpuPaths.entries()) {
    if (!unverified_gpu_path_allowed(entry.value)) continue;
    if (!text.empty()) text += ", ";
    text += entry.name;
  }
  return text.empty() ? "none" : text;
}

}  // namespace titan
