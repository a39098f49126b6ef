#include "support/training_run.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "support/metrics_file.h"
#include "support/refusal.h"

namespace titan::testing {

TrainingRun train_debug_model(const std::string& scratch, const std::string& name,
                              const std::string& args, const std::string& launcher) {
  const std::string jsonl = scratch_dir(scratch) + "/" + name + ".jsonl";
  std::filesystem::remove(jsonl);
  TrainingRun run;
  run.process = run_process(launcher + binary_path("titan_train") +
                            " --config configs/debug_model.yaml --metrics.log_freq 1 " + args +
                            " --metrics.jsonl " + jsonl);
  REQUIRE_MESSAGE(run.process.exit_code == 0, name << ": " << run.process.err);
  run.losses = losses_of(read_metrics_jsonl(jsonl));
  return run;
}

void check_losses_track(const std::string& name, const std::vector<double>& got,
                        const std::vector<double>& reference, double tolerance) {
  REQUIRE_MESSAGE(got.size() == reference.size(),
                  name << ": " << got.size() << " steps against " << reference.size());
  double worst = 0;
  for (size_t step = 0; step < got.size(); ++step) {
    const double rel = std::abs(got[step] - reference[step]) / std::abs(reference[step]);
    worst = std::max(worst, rel);
    CHECK_MESSAGE(rel <= tolerance, name << " step " << step + 1 << ": loss " << got[step]
                                         << " vs " << reference[step]);
  }
  MESSAGE(name << ": worst relative loss difference over " << got.size() << " steps " << worst);
}

void check_train_rejected(const std::string& args, const std::vector<std::string>& fragments) {
  check_refused("titan_train", "--config configs/debug_model.yaml --training.steps 2 " + args,
                fragments);
}

}  // namespace titan::testing
