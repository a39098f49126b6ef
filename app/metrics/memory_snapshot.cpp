#include "app/metrics/memory_snapshot.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <filesystem>
#include <fstream>
#include <map>

#include "app/output_folder.h"
#include "core/json_text.h"
#include "core/cuda/backend.h"

namespace titan::app {

namespace fs = std::filesystem;

namespace {

std::string format_bytes(double bytes) {
  if (bytes >= 1024.0 * 1024.0 * 1024.0) return fmt::format("{:.2f} GiB", bytes / (1 << 30));
  if (bytes >= 1024.0 * 1024.0) return fmt::format("{:.1f} MiB", bytes / (1 << 20));
  return fmt::format("{:.1f} KiB", bytes / 1024.0);
}

}  // namespace

MemorySnapshot::MemorySnapshot(std::string folder, int rank, Device device)
    : folder_(std::move(folder)), rank_(rank), device_(device), memory_(allocator_for(device)) {
  ensure_writable_folder(folder_, "profiling.save_memory_snapshot_folder");
}

void MemorySnapshot::start() {
  memory_.track_peak_breakdown();
  peak_bytes_ = memory_.peak_breakdown().total_bytes;
  peak_step_ = 0;
}

void MemorySnapshot::end_step(int64_t step) {
  const int64_t peak = memory_.peak_breakdown().total_bytes;
  if (peak > peak_bytes_) {
    peak_bytes_ = peak;
    peak_step_ = step;
  }
}

std::string MemorySnapshot::write_peak(bool logging_rank) const {
  const MemoryBreakdown peak = memory_.peak_breakdown();
  const std::string path =
      write(fmt::format("iteration_{}", peak_step_), peak_step_, "peak", peak, "");
  if (logging_rank) {
    spdlog::info("memory at the peak (step {}, rank {}): {}; written to {}", peak_step_, rank_,
                 summarize_memory(peak), path);
  }
  return path;
}

std::string MemorySnapshot::write_out_of_memory(int64_t step, const std::string& error) const {
  const MemoryBreakdown now = memory_.live_breakdown();
  const std::string path =
      write(fmt::format("iteration_{}_exit", step), step, "out_of_memory", now, error);
  spdlog::error("memory when out of memory (step {}, rank {}): {}; written to {}", step, rank_,
                summarize_memory(now), path);
  return path;
}

std::string MemorySnapshot::write(const std::string& subfolder, int64_t step, const char* kind,
                                  const MemoryBreakdown& breakdown,
                                  const std::string& error) const {
  const fs::path dir = fs::path(folder_) / subfolder;
  std::error_code ec;
  fs::create_directories(dir, ec);
  const fs::path path = dir / fmt::format("rank{}_memory_snapshot.json", rank_);
  std::string json = fmt::format(
      "{{\"rank\": {}, \"step\": {}, \"device\": {}, \"kind\": \"{}\", \"total_bytes\": {}, "
      "\"allocator_cache_bytes\": {}, \"by_category\": {{",
      rank_, step, json_string(detail::concat(device_)), kind, breakdown.total_bytes,
      device_.is_cuda() ? cuda_backend::allocator_cached_bytes() : 0);
  for (size_t i = 0; i < breakdown.by_tag.size(); ++i) {
    json += fmt::format("{}{}: {}", i == 0 ? "" : ", ", json_string(breakdown.by_tag[i].first),
                        breakdown.by_tag[i].second);
  }
  json += "}";
  if (!error.empty()) json += ", \"error\": " + json_string(error);
  json += "}\n";
  std::ofstream out(path);
  out << json;
  if (!out) throw Error(detail::concat("memory snapshot: cannot write '", path.string(), "'"));
  return path.string();
}

std::string summarize_memory(const MemoryBreakdown& breakdown) {
  // Activation blocks summed into one category; the busiest block named.
  std::map<std::string, int64_t> by_category;
  std::string top_block;
  int64_t top_block_bytes = 0;
  for (const auto& [name, bytes] : breakdown.by_tag) {
    const std::string prefix = "activations.block.";
    if (name.rfind(prefix, 0) == 0) {
      by_category["activations"] += bytes;
      if (bytes > top_block_bytes) {
        top_block_bytes = bytes;
        top_block = name.substr(prefix.size());
      }
    } else if (name == "activations.outside_blocks") {
      by_category["activations"] += bytes;
    } else {
      by_category[name] += bytes;
    }
  }
  std::vector<std::pair<std::string, int64_t>> sorted(by_category.begin(), by_category.end());
  std::stable_sort(sorted.begin(), sorted.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  std::string text = format_bytes(static_cast<double>(breakdown.total_bytes)) + " =";
  for (size_t i = 0; i < sorted.size(); ++i) {
    text += fmt::format("{} {} {}", i == 0 ? "" : " +", sorted[i].first,
                        format_bytes(static_cast<double>(sorted[i].second)));
    if (sorted[i].first == "activations" && !top_block.empty()) {
      text += fmt::format(" (block {} the most, {})", top_block,
                          format_bytes(static_cast<double>(top_block_bytes)));
    }
  }
  return text;
}

}  // namespace titan::app
