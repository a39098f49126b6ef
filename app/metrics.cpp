#include "app/metrics.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <filesystem>

#include "core/check.h"

namespace titan::app {

MetricsLogger::MetricsLogger(const std::string& jsonl_path, bool logging_rank, bool append)
    : logging_rank_(logging_rank) {
  if (!logging_rank_ || jsonl_path.empty()) return;
  std::filesystem::path parent = std::filesystem::path(jsonl_path).parent_path();
  std::error_code ec;
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  jsonl_.open(jsonl_path, append ? std::ios::app : std::ios::trunc);
  if (!jsonl_) {
    input_error("metrics.jsonl: cannot write '", jsonl_path,
                "'; point it at a writable path or leave it empty");
  }
}

void MetricsLogger::log(const StepMetrics& m) {
  if (!logging_rank_) return;
  spdlog::info(
      "step {:>5}  loss {:8.4f}  grad_norm {:7.4f}  lr {:.3e}  tok/s {:>9.0f} ({:.0f}/device)  "
      "step {:7.1f} ms  mem {:6.3f} GiB",
      m.step, m.loss, m.grad_norm, m.lr, m.tokens_per_s, m.tokens_per_s_per_device, m.step_ms,
      m.peak_mem_gib);
  if (jsonl_.is_open()) {
    jsonl_ << fmt::format(
        "{{\"step\": {}, \"loss\": {:.9g}, \"grad_norm\": {:.9g}, \"lr\": {:.9g}, "
        "\"tokens_per_s\": {:.6g}, \"tokens_per_s_per_device\": {:.6g}, \"step_ms\": {:.6g}, "
        "\"peak_mem_gib\": {:.6g}}}\n",
        m.step, m.loss, m.grad_norm, m.lr, m.tokens_per_s, m.tokens_per_s_per_device, m.step_ms,
        m.peak_mem_gib);
    jsonl_.flush();
  }
}

}  // namespace titan::app
