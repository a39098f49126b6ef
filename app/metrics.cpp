#include "app/metrics.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cctype>
#include <filesystem>

#include "core/check.h"

namespace titan::app {

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

}  // namespace

double peak_bf16_tflops(std::string_view device_name) {
  // Substring tests in torchtitan's order, case-insensitive so that CUDA's "NVIDIA L40S" finds
  // the L40S entry (torchtitan tests for "l40s"). Dense figures: NVIDIA's datasheets quote
  // twice these with 2:4 sparsity.
  const std::string name = lower(device_name);
  auto has = [&name](std::string_view part) { return name.find(part) != std::string::npos; };
  if (has("a100")) return 312;
  if (has("h100")) {
    if (has("nvl")) return 835;
    if (has("pcie")) return 756;
    return 989;  // SXM ("NVIDIA H100 80GB HBM3") and other variants
  }
  if (has("h200")) return 989;
  if (has("b200")) return 2250;
  if (has("l40s")) return 362;
  return 0;
}

void set_flops(StepMetrics& m, double flops_per_token, double peak_tflops) {
  m.tflops = flops_per_token * m.tokens_per_s_per_device / 1e12;
  m.mfu_pct.reset();
  if (peak_tflops > 0) m.mfu_pct = 100.0 * m.tflops / peak_tflops;
}

void set_peak_memory(StepMetrics& m, double peak_bytes, int64_t device_bytes) {
  m.peak_mem_gib = peak_bytes / kGiB;
  m.peak_mem_pct.reset();
  if (device_bytes > 0) m.peak_mem_pct = 100.0 * peak_bytes / static_cast<double>(device_bytes);
}

std::string format_metrics_line(const StepMetrics& m) {
  std::string line = fmt::format(
      "step {:>5}  loss {:8.4f}  grad_norm {:7.4f}  lr {:.3e}  tok/s {:>9.0f} ({:.0f}/device)  "
      "step {:7.1f} ms  mem {:6.3f} GiB",
      m.step, m.loss, m.grad_norm, m.lr, m.tokens_per_s, m.tokens_per_s_per_device, m.step_ms,
      m.peak_mem_gib);
  if (m.peak_mem_pct) line += fmt::format(" ({:.1f}%)", *m.peak_mem_pct);
  line += fmt::format("  tflops {:7.2f}", m.tflops);
  if (m.mfu_pct) line += fmt::format("  mfu {:5.2f}%", *m.mfu_pct);
  return line;
}

std::string format_metrics_json(const StepMetrics& m) {
  std::string json = fmt::format(
      "{{\"step\": {}, \"loss\": {:.9g}, \"grad_norm\": {:.9g}, \"lr\": {:.9g}, "
      "\"tokens_per_s\": {:.6g}, \"tokens_per_s_per_device\": {:.6g}, \"step_ms\": {:.6g}, "
      "\"peak_mem_gib\": {:.6g}",
      m.step, m.loss, m.grad_norm, m.lr, m.tokens_per_s, m.tokens_per_s_per_device, m.step_ms,
      m.peak_mem_gib);
  if (m.peak_mem_pct) json += fmt::format(", \"peak_mem_pct\": {:.6g}", *m.peak_mem_pct);
  json += fmt::format(", \"tflops\": {:.6g}", m.tflops);
  if (m.mfu_pct) json += fmt::format(", \"mfu\": {:.6g}", *m.mfu_pct);
  return json + "}";
}

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
  spdlog::info("{}", format_metrics_line(m));
  if (jsonl_.is_open()) {
    jsonl_ << format_metrics_json(m) << '\n';
    jsonl_.flush();
  }
}

}  // namespace titan::app
