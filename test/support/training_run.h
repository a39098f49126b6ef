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

// Runs titan_train on the debug config for 2 steps with `args` and checks that it is refused
// as bad input: exit code 2, one stderr line "titan_train: error: …" holding every fragment,
// nothing on stdout (no rank started training).
void check_train_rejected(const std::string& args, const std::vector<std::string>& fragments);

}  // namespace titan::testing
