// Where a step's figures go. The metrics processor (app/metrics/metrics_processor.h) computes a
// step's figures once, as one ordered list of named scalars, and hands the same list to every sink:
// the console line, the JSON lines file, TensorBoard. A sink formats; it never computes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace titan::app {

// One figure of a step. `name` is the JSON lines key and the TensorBoard tag ("loss",
// "tokens_per_s", "mfu"); the list holds only figures known for this step (no MFU on a CPU).
struct Scalar {
  std::string name;
  double value = 0;
};

struct StepReport {
  int64_t step = 0;
  std::vector<Scalar> scalars;  // in the order they were added; names unique

  // The value of `name`, or nullptr when this step does not report it.
  const double* find(const std::string& name) const {
    for (const Scalar& s : scalars) {
      if (s.name == name) return &s.value;
    }
    return nullptr;
  }
};

class MetricSink {
 public:
  virtual ~MetricSink() = default;
  // Once, before the first step: the effective config as YAML (TensorBoard shows it as text).
  virtual void write_config(const std::string& yaml) { (void)yaml; }
  virtual void write(const StepReport& report) = 0;
  // Makes everything written so far durable (the run is ending, or a checkpoint was saved).
  virtual void flush() {}
};

}  // namespace titan::app
