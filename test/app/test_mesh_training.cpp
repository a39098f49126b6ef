// Every mesh trains like one rank (ARCHITECTURE.md decisions 5–7): the debug model at a fixed
// seed, 20 steps of 8 sequences, on every 3-D mesh of 8 ranks the issue names, logs the
// single-rank loss at every step to 1e-3 relative — and so does one rank accumulating 4
// micro-batches of 2. Sequences are 64 tokens so that 8 ranks on a 2-core machine finish in
// about a minute; the arithmetic per token is the debug model's.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>

#include "support/metrics_file.h"
#include "support/process.h"

using namespace titan::testing;

namespace {

constexpr int kSteps = 20;
constexpr int kGlobalBatch = 8;

struct Mesh {
  int dp_replicate, dp_shard, tp;
};

std::string mesh_name(const Mesh& m) {
  return "(" + std::to_string(m.dp_replicate) + "," + std::to_string(m.dp_shard) + "," +
         std::to_string(m.tp) + ")";
}

// Per-step losses of the debug model on `ranks` ranks with the given flags.
std::vector<double> losses(const std::string& name, int ranks, const std::string& flags) {
  const std::string jsonl = scratch_dir("mesh_training") + "/" + name + ".jsonl";
  std::filesystem::remove(jsonl);
  ProcessResult r = run_process(
      "mpirun --allow-run-as-root --oversubscribe --bind-to none -np " + std::to_string(ranks) +
      " " + binary_path("titan_train") +
      " --config configs/debug_model.yaml --metrics.log_freq 1 --training.steps " +
      std::to_string(kSteps) + " --training.seq_len 64 --training.global_batch_size " +
      std::to_string(kGlobalBatch) + " " + flags + " --metrics.jsonl " + jsonl);
  REQUIRE_MESSAGE(r.exit_code == 0, name << ": " << r.err);
  std::vector<double> result = losses_of(read_metrics_jsonl(jsonl));
  REQUIRE_MESSAGE(result.size() == kSteps, name << ": " << result.size() << " steps logged");
  return result;
}

void check_tracks(const std::string& name, const std::vector<double>& got,
                  const std::vector<double>& reference) {
  double worst = 0;
  for (int step = 0; step < kSteps; ++step) {
    const double rel = std::abs(got[step] - reference[step]) / std::abs(reference[step]);
    worst = std::max(worst, rel);
    CHECK_MESSAGE(rel <= 1e-3, name << " step " << step + 1 << ": loss " << got[step]
                                    << " vs single rank " << reference[step]);
  }
  MESSAGE(name << ": worst relative loss difference over " << kSteps << " steps " << worst);
}

}  // namespace

TEST_SUITE("mpi") {
  TEST_CASE("every mesh of 8 ranks and gradient accumulation track the single-rank loss") {
    const std::vector<double> reference =
        losses("single_rank", 1, "--training.local_batch_size 8");
    CHECK(reference.back() < reference.front());

    check_tracks("1 rank, 4 micro-batches of 2",
                 losses("accumulation", 1, "--training.local_batch_size 2"), reference);

    const Mesh meshes[] = {{2, 2, 2}, {1, 2, 4}, {1, 8, 1}, {8, 1, 1},
                           {1, 1, 8}, {2, 4, 1}, {4, 1, 2}};
    for (const Mesh& m : meshes) {
      const int dp = m.dp_replicate * m.dp_shard;
      const std::string flags =
          "--parallelism.dp_replicate " + std::to_string(m.dp_replicate) +
          " --parallelism.dp_shard " + std::to_string(m.dp_shard) + " --parallelism.tp " +
          std::to_string(m.tp) + " --training.local_batch_size " +
          std::to_string(kGlobalBatch / dp);
      const std::string file = "mesh_" + std::to_string(m.dp_replicate) + "_" +
                               std::to_string(m.dp_shard) + "_" + std::to_string(m.tp);
      check_tracks("mesh " + mesh_name(m), losses(file, 8, flags), reference);
    }
  }
}
