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

// Each step's loss of `got` within `tolerance` relative of `reference`'s (a mesh against one
// rank, say), one CHECK a step naming `name`; the worst difference as a MESSAGE.
void check_losses_track(const std::string& name, const std::vector<double>& got,
                        const std::vector<double>& reference, double tolerance);

// Runs titan_train on the debug config for 2 steps with `args` and checks that it is refused
// as bad input: exit code 2, one stderr line "titan_train: error: …" holding every fragment,
// nothing on stdout (no rank started training).
void check_train_rejected(const std::string& args, const std::vector<std::string>& fragments);

}  // namespace titan::testing
