// The metrics line of a training step: logged by rank 0 through spdlog, and written as one JSON
// object per line to metrics.jsonl when that is set. Keys: step, loss, grad_norm, lr,
// tokens_per_s, tokens_per_s_per_device, step_ms, peak_mem_gib, tflops; and, only when the
// device makes them known, peak_mem_pct and mfu (both in percent). Every value is a number;
// keys are only ever added, so older readers keep working.
//
// Throughput follows torchtitan: the model FLOPs of a token (model::training_flops_per_token)
// times the tokens per second of one device give the achieved TFLOP/s, and MFU divides that
// by the device's dense bf16 peak — for FP8 runs too, as torchtitan reports them.
#pragma once

#include <cstdint>
#include <fstream>
#include <optional>
#include <string>
#include <string_view>

namespace titan::app {

struct StepMetrics {
  int64_t step = 0;
  double loss = 0;       // mean token loss of the global batch
  double grad_norm = 0;  // global, before clipping
  double lr = 0;
  double tokens_per_s = 0;             // all ranks together, over the steps since the last line
  double tokens_per_s_per_device = 0;  // tokens_per_s / world size (torchtitan's "tps")
  double step_ms = 0;                  // mean wall time per step since the last line
  double peak_mem_gib = 0;  // most tensor bytes held at once on one device (the busiest rank)
  std::optional<double> peak_mem_pct;  // peak_mem_gib as a share of the device's memory
  double tflops = 0;                   // model TFLOP/s achieved per device
  std::optional<double> mfu_pct;       // 100 · tflops / the device's bf16 dense peak
};

// The dense bf16 tensor-core peak, in TFLOP/s, of a CUDA device by its name
// (cudaDeviceProp::name, e.g. "NVIDIA H100 80GB HBM3"), as torchtitan's get_peak_flops
// (torchtitan/tools/utils.py): A100 312; H100 NVL 835, H100 PCIe 756, other H100 (SXM) 989;
// H200 989; B200 2250; L40S 362. 0 for any other name (and for "cpu"): MFU is then not reported,
// where torchtitan would assume an A100.
double peak_bf16_tflops(std::string_view device_name);

// Sets m.tflops = flops_per_token · m.tokens_per_s_per_device / 1e12 and, when peak_tflops > 0,
// m.mfu_pct = 100 · m.tflops / peak_tflops. Call after tokens_per_s_per_device is set.
void set_flops(StepMetrics& m, double flops_per_token, double peak_tflops);

// Sets m.peak_mem_gib from the busiest rank's peak tensor bytes (Allocator::stats().peak_bytes
// of the training device, max over ranks) and, when device_bytes > 0 (the device's memory,
// CudaDeviceInfo::total_bytes), m.peak_mem_pct.
void set_peak_memory(StepMetrics& m, double peak_bytes, int64_t device_bytes);

class MetricsLogger {
 public:
  // Only the logging rank writes; jsonl_path empty means no JSON lines. `append` keeps the
  // lines already in the file (a resumed run), otherwise it starts the file afresh.
  MetricsLogger(const std::string& jsonl_path, bool logging_rank, bool append);
  void log(const StepMetrics& m);

 private:
  bool logging_rank_;
  std::ofstream jsonl_;
};

// The console line and the JSON object of a step (without the newline).
std::string format_metrics_line(const StepMetrics& m);
std::string format_metrics_json(const StepMetrics& m);

}  // namespace titan::app
