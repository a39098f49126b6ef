// The golden-loss test: the first 20 steps of the debug model on the King James Bible at seed 0
// must reproduce test/golden/debug_model_loss.txt to 1e-4 relative. Any change to the model,
// the ops, the init, the data order or the optimizer shows here; if the change is meant,
// regenerate the file with scripts/update_golden.sh and say why in the commit.
// (Measured: OpenBLAS's Haswell, Sandy Bridge and Cooper Lake kernels agree to 1e-8 over these
// steps, so the tolerance leaves room for other CPUs and nothing else.)
#include <doctest/doctest.h>

#include <cmath>
#include <fstream>
#include <sstream>

#include "support/metrics_file.h"
#include "support/process.h"

using namespace titan::testing;

TEST_SUITE("check") {
  TEST_CASE(
      "golden loss: the debug model's first 20 steps match test/golden/debug_model_loss.txt") {
    REQUIRE_MESSAGE(std::ifstream(source_path("corpus/kjv.txt")).good(),
                    "corpus/kjv.txt is missing: run scripts/setup.sh");
    std::vector<std::pair<int, double>> golden;
    std::ifstream in(source_path("test/golden/debug_model_loss.txt"));
    for (std::string line; std::getline(in, line);) {
      if (line.empty() || line[0] == '#') continue;
      std::istringstream fields(line);
      int step = 0;
      double loss = 0;
      fields >> step >> loss;
      golden.emplace_back(step, loss);
    }
    REQUIRE(golden.size() == 20);

    const std::string jsonl = scratch_dir("golden") + "/metrics.jsonl";
    ProcessResult r = run_process(binary_path("titan_train") +
                                  " --config configs/debug_model.yaml --training.steps 20"
                                  " --metrics.log_freq 1 --metrics.jsonl " +
                                  jsonl);
    REQUIRE_MESSAGE(r.exit_code == 0, r.err);
    std::vector<double> losses = losses_of(read_metrics_jsonl(jsonl));
    REQUIRE(losses.size() == golden.size());
    double worst = 0;
    for (size_t i = 0; i < golden.size(); ++i) {
      double rel = std::fabs(losses[i] - golden[i].second) / golden[i].second;
      worst = std::max(worst, rel);
      CHECK_MESSAGE(rel <= 1e-4, "step " << golden[i].first << ": loss " << losses[i] << ", golden "
                                         << golden[i].second);
    }
    MESSAGE("golden loss: worst relative difference " << worst << " over 20 steps");
  }

}  // TEST_SUITE
