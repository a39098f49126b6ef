// Training the debug model end to end from a test and reading back its per-step losses.
#pragma once

#include <string>
#include <vector>

#include "support/process.h"

namespace titan::testing {

struct TrainingRun {
  ProcessResult process;
  std::vector<double> losses;  // one per metrics line
};

// Runs `launcher` titan_train --config configs/debug_model.yaml with a metrics line every step
// and `args`, writing the metrics to <scratch dir `scratch`>/<name>.jsonl; the test stops
// (REQUIRE) when the run fails. `launcher` is "" for one process or mpirun_launcher(N).
TrainingRun train_debug_model(const std::string& scratch, const std::string& name,
                              const std::string& args, const std::string& launcher = "");

}  // namespace titan::testing
