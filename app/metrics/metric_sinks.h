// The sinks that write a step's report as text: the console line (spdlog) and JSON lines.
// TensorBoard's is app/metrics/tensorboard/tensorboard_sink.h.
#pragma once

#include <cstdint>
#include <fstream>
#include <string>

#include "app/metrics/metric_sink.h"

namespace titan::app {

// The metrics line: "step 10/200 (5%)  loss 7.1234  grad_norm 1.2345  lr 8.000e-04  tok/s …".
// Figures a report lacks are left out.
std::string format_metrics_line(const StepReport& report, int64_t last_step);

// The JSON object of a report, without the newline: "step" first, then every scalar in order.
// Whole numbers below 2^53 (step, tokens) print as integers; others with 9 significant digits.
std::string format_metrics_json(const StepReport& report);

class ConsoleSink final : public MetricSink {
 public:
  explicit ConsoleSink(int64_t last_step) : last_step_(last_step) {}
  void write(const StepReport& report) override;

 private:
  int64_t last_step_;
};

class JsonlSink final : public MetricSink {
 public:
  // `append` keeps the lines already in the file (a resumed run); otherwise it starts afresh.
  // InputError naming the path when it cannot be written.
  JsonlSink(const std::string& path, bool append);
  void write(const StepReport& report) override;
  void flush() override;

 private:
  std::ofstream out_;
};

}  // namespace titan::app
