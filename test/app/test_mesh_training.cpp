// Every mesh trains like one rank (docs/architecture.md#decision-5 to #decision-7): the debug model
// at a fixed seed, 20 steps of 8 sequences, on the mesh (2, 2, 2) (and in the matrix tier on six
// more 3-D meshes of 8 ranks), logs the single-rank loss at every step to 1e-3 relative — and so
// does one rank accumulating 4 micro-batches of 2, and two meshes with accumulation, no
// resharding and activation checkpointing. Sequences are 64 tokens so that 8 ranks on a 2-core
// machine finish in about a minute; the arithmetic per token is the debug model's.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <sstream>

#include "support/metrics_file.h"
#include "support/process.h"
#include "support/training_run.h"

using namespace titan::testing;

namespace {

constexpr int kMeshSteps = 20;
constexpr int kMeshGlobalBatch = 8;

struct TrainingMesh {
  int dp_replicate, dp_shard, tp;
};

std::string mesh_name(const TrainingMesh& m) {
  std::ostringstream name;
  name << "(" << m.dp_replicate << "," << m.dp_shard << "," << m.tp << ")";
  return name.str();
}

// Per-step losses of the debug model on `ranks` ranks with the given flags; `expected_lines`
// metrics lines (a resumed run logs only the steps after its checkpoint).
std::vector<double> losses(const std::string& name, int ranks, const std::string& flags,
                           size_t expected_lines = kMeshSteps) {
  std::vector<double> result =
      train_debug_model("mesh_training", name,
                        "--training.steps " + std::to_string(kMeshSteps) +
                            " --training.seq_len 64 --training.global_batch_size " +
                            std::to_string(kMeshGlobalBatch) + " " + flags,
                        mpirun_launcher(ranks))
          .losses;
  REQUIRE_MESSAGE(result.size() == expected_lines,
                  name << ": " << result.size() << " steps logged");
  return result;
}

void check_mesh_tracks(const std::string& name, const std::vector<double>& got,
                       const std::vector<double>& reference) {
  double worst = 0;
  for (int step = 0; step < kMeshSteps; ++step) {
    const double rel = std::abs(got[step] - reference[step]) / std::abs(reference[step]);
    worst = std::max(worst, rel);
    CHECK_MESSAGE(rel <= 1e-3, name << " step " << step + 1 << ": loss " << got[step]
                                    << " vs single rank " << reference[step]);
  }
  MESSAGE(name << ": worst relative loss difference over " << kMeshSteps << " steps " << worst);
}

}  // namespace

namespace {

// One mesh's 20 steps against the single-rank reference, at the global batch of 8.
void check_mesh(const TrainingMesh& m, const std::vector<double>& reference) {
  const int dp = m.dp_replicate * m.dp_shard;
  const std::string flags = "--parallelism.dp_replicate " + std::to_string(m.dp_replicate) +
                            " --parallelism.dp_shard " + std::to_string(m.dp_shard) +
                            " --parallelism.tp " + std::to_string(m.tp) +
                            " --training.local_batch_size " + std::to_string(kMeshGlobalBatch / dp);
  const std::string file = "mesh_" + std::to_string(m.dp_replicate) + "_" +
                           std::to_string(m.dp_shard) + "_" + std::to_string(m.tp);
  check_mesh_tracks("mesh " + mesh_name(m), losses(file, m.dp_replicate * m.dp_shard * m.tp, flags),
                    reference);
}

std::vector<double> single_rank_reference() {
  const std::vector<double> reference = losses("single_rank", 1, "--training.local_batch_size 8");
  CHECK(reference.back() < reference.front());
  return reference;
}

}  // namespace

TEST_SUITE("check ranks=8") {
  TEST_CASE(
      "mesh (2 2 2) and its variant with accumulation and no reshard and full AC track the "
      "single-rank loss") {
    const std::vector<double> reference = single_rank_reference();
    // Every dim of the mesh at once: HSDP (reduce-scatter over dp_shard, all-reduce over
    // dp_replicate) around sequence-parallel TP.
    check_mesh({2, 2, 2}, reference);

    // The paths the mesh above does not take: FSDP with gradient accumulation (each micro-
    // batch reduce-scattered and added), parameters kept gathered from forward to backward,
    // and activation checkpointing recomputing through tp collectives.
    check_mesh_tracks(
        "mesh (2,2,2), 2 micro-batches of 1, no reshard, full AC",
        losses("variant_accumulate", 8,
               "--parallelism.dp_replicate 2 --parallelism.dp_shard 2 --parallelism.tp 2"
               " --training.local_batch_size 1 --parallelism.reshard_after_forward false"
               " --activation_checkpoint.mode full"),
        reference);
  }
}

TEST_SUITE("matrix ranks=8") {
  TEST_CASE("one rank with accumulation and mesh (1 2 4) with op AC track the single-rank loss") {
    const std::vector<double> reference = single_rank_reference();
    check_mesh_tracks("1 rank, 4 micro-batches of 2",
                      losses("accumulation", 1, "--training.local_batch_size 2"), reference);
    check_mesh_tracks(
        "mesh (1,2,4), op AC",
        losses("variant_op_ac", 8,
               "--parallelism.dp_shard 2 --parallelism.tp 4 --training.local_batch_size 4"
               " --activation_checkpoint.mode op"),
        reference);
  }
}

TEST_SUITE("matrix ranks=8") {
  TEST_CASE("every other mesh of 8 ranks tracks the single-rank loss") {
    const std::vector<double> reference = single_rank_reference();
    const TrainingMesh meshes[] = {{1, 2, 4}, {1, 8, 1}, {8, 1, 1},
                                   {1, 1, 8}, {2, 4, 1}, {4, 1, 2}};
    for (const TrainingMesh& m : meshes) check_mesh(m, reference);
  }
}

namespace {

// The trainer's "per rank: parameters P MiB, gradients G MiB, AdamW state A MiB" line and,
// under FSDP, its "peak parameter + gradient + optimizer memory M MiB per rank" line.
struct RankMemory {
  double persistent_mib = 0;
  double peak_mib = 0;
};

RankMemory rank_memory(int dp_shard) {
  ProcessResult r = run_process(mpirun_launcher(dp_shard) + binary_path("titan_train") +
                                " --config configs/debug_model.yaml --training.steps 1"
                                " --training.seq_len 64 --training.local_batch_size 1");
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  RankMemory m;
  double params = 0, grads = 0, adam = 0;
  const size_t line = r.out.find("per rank: parameters");
  REQUIRE(line != std::string::npos);
  REQUIRE(std::sscanf(r.out.c_str() + line,
                      "per rank: parameters %lf MiB, gradients %lf MiB, AdamW state %lf MiB",
                      &params, &grads, &adam) == 3);
  m.persistent_mib = params + grads + adam;
  m.peak_mib = m.persistent_mib;  // nothing is gathered without FSDP
  const size_t peak = r.out.find("peak parameter + gradient + optimizer memory");
  if (dp_shard > 1) {
    REQUIRE(peak != std::string::npos);
    REQUIRE(std::sscanf(r.out.c_str() + peak,
                        "peak parameter + gradient + optimizer memory %lf MiB", &m.peak_mib) == 1);
  }
  return m;
}

}  // namespace

TEST_SUITE("check ranks=4") {
  TEST_CASE(
      "FSDP saves memory: parameter gradient and optimizer bytes per rank fall with dp_shard") {
    const RankMemory one = rank_memory(1), two = rank_memory(2), four = rank_memory(4);
    MESSAGE("persistent MiB per rank: " << one.persistent_mib << ", " << two.persistent_mib << ", "
                                        << four.persistent_mib << "; peak " << one.peak_mib << ", "
                                        << two.peak_mib << ", " << four.peak_mib);
    // The shards themselves halve (up to padding) with each doubling of dp_shard ...
    CHECK(two.persistent_mib == doctest::Approx(one.persistent_mib / 2).epsilon(0.01));
    CHECK(four.persistent_mib == doctest::Approx(one.persistent_mib / 4).epsilon(0.01));
    // ... and the peak, which adds the gathered block, its gradients and the collectives'
    // buffers, still falls.
    CHECK(two.peak_mib < 0.75 * one.peak_mib);
    CHECK(four.peak_mib < two.peak_mib);
  }
}

TEST_SUITE("check ranks=4") {
  TEST_CASE(
      "a checkpoint saved on mesh (1 2 2) resumes on mesh (2 1 1) and tracks the single rank" *
      doctest::test_suite("matrix ranks=4")) {
    // The files hold full tensors, so the mesh that resumes need not be the one that saved.
    const std::vector<double> reference =
        losses("resume_reference", 1, "--training.local_batch_size 8");
    const std::string folder = scratch_dir("mesh_training") + "/resharded";
    std::filesystem::remove_all(folder);
    const std::string checkpointing =
        " --checkpoint.enable true --checkpoint.interval 10"
        " --job.dump_folder " +
        folder;
    losses("resume_first", 4,
           "--parallelism.dp_shard 2 --parallelism.tp 2 --training.local_batch_size 4" +
               checkpointing);
    // Keep step 10 only: the second run must start from it.
    std::filesystem::remove_all(folder + "/checkpoint/step-20");
    const std::vector<double> resumed =
        losses("resume_second", 2,
               "--parallelism.dp_replicate 2 --parallelism.dp_shard 1 "
               "--training.local_batch_size 4" +
                   checkpointing,
               kMeshSteps - 10);
    double worst = 0;
    for (int i = 0; i < kMeshSteps - 10; ++i) {
      const double rel = std::abs(resumed[i] - reference[10 + i]) / reference[10 + i];
      worst = std::max(worst, rel);
      CHECK_MESSAGE(rel <= 1e-3, "step " << 11 + i << ": " << resumed[i] << " vs single rank "
                                         << reference[10 + i]);
    }
    MESSAGE("resumed on another mesh: worst relative loss difference " << worst);
  }
}
