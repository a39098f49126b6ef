// The metrics line of a training step: logged by rank 0 through spdlog, and written as one JSON
// object per line to metrics.jsonl when that is set (keys step, loss, grad_norm, lr,
// tokens_per_s, tokens_per_s_per_device, step_ms, peak_mem_gib).
#pragma once

#include <cstdint>
#include <fstream>
#include <string>

namespace titan::app {

struct StepMetrics {
  int64_t step = 0;
  double loss = 0;       // mean token loss of the global batch
  double grad_norm = 0;  // global, before clipping
  double lr = 0;
  double tokens_per_s = 0;  // all ranks together, over the steps since the last line
  double tokens_per_s_per_device = 0;  // tokens_per_s / world size (torchtitan's "tps")
  double step_ms = 0;       // mean wall time per step since the last line
  double peak_mem_gib = 0;  // most tensor bytes held at once on one device (the busiest rank)
};

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

}  // namespace titan::app
