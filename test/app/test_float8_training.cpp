// FP8 training end to end, with the CPU emulation of every recipe: each recipe trains
// on one rank and on the (1, 2, 2) and (2, 2, 2) meshes, and the regressions torchtitan / torchao
// users hit are tests here: rowwise under tp with full activation checkpointing, and a vocabulary
// that FP8 cannot split under tp.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>

#include "support/metrics_file.h"
#include "support/process.h"
#include "support/training_run.h"

using namespace titan::testing;

namespace {

const char* const kRecipes[] = {"tensorwise", "rowwise", "rowwise_with_gw_hp", "blockwise"};

TrainingRun run(const std::string& name, const std::string& launcher, const std::string& flags,
                int steps) {
  TrainingRun r = train_debug_model(
      "float8_training", name,
      "--training.seq_len 64 --training.steps " + std::to_string(steps) + " " + flags, launcher);
  REQUIRE(r.losses.size() == static_cast<size_t>(steps));
  return r;
}

std::vector<double> run_losses(const std::string& name, const std::string& launcher,
                               const std::string& flags, int steps) {
  return run(name, launcher, flags, steps).losses;
}

// Every recipe for 6 steps on a mesh of (dp_replicate, dp_shard, tp): the loss falls.
void every_recipe_trains_on(int replicate, int shard, int tp) {
  const std::string mesh = std::to_string(replicate) + std::to_string(shard) + std::to_string(tp);
  for (const char* recipe : kRecipes) {
    CAPTURE(recipe);
    const std::vector<double> losses = run_losses(
        "mesh" + mesh + "_" + recipe, mpirun_launcher(replicate * shard * tp),
        "--parallelism.dp_replicate " + std::to_string(replicate) + " --parallelism.dp_shard " +
            std::to_string(shard) + " --parallelism.tp " + std::to_string(tp) +
            " --training.local_batch_size 2 --float8.enabled true --float8.recipe " + recipe,
        6);
    CHECK(losses.back() < losses.front());
  }
}

}  // namespace

// Each recipe's path runs in the check tier on the (1 2 2) mesh below, FSDP and TP together;
// the same with HSDP's replicas on eight ranks, and how close each recipe stays to high
// precision over 20 steps, are the matrix tier's.
TEST_SUITE("matrix") {
  TEST_CASE("every FP8 recipe trains one rank and stays near the high-precision loss") {
    const std::vector<double> reference =
        run_losses("high_precision", "", "--training.local_batch_size 4", 20);
    for (const char* recipe : kRecipes) {
      const std::vector<double> fp8 = run_losses(
          std::string("one_rank_") + recipe, "",
          std::string("--training.local_batch_size 4 --float8.enabled true --float8.recipe ") +
              recipe,
          20);
      CAPTURE(recipe);
      CHECK(fp8.back() < 0.8 * fp8.front());
      const double rel = std::abs(fp8.back() - reference.back()) / reference.back();
      MESSAGE(std::string(recipe) << ": loss " << fp8.back() << " after 20 steps, high precision "
                                  << reference.back() << " (" << 100 * rel << "% apart)");
      CHECK(rel < 0.03);
    }
  }
}

TEST_SUITE("matrix ranks=8") {
  TEST_CASE("every FP8 recipe trains on mesh (2 2 2)") { every_recipe_trains_on(2, 2, 2); }
}

TEST_SUITE("check ranks=4") {
  TEST_CASE("every FP8 recipe trains on mesh (1 2 2)") { every_recipe_trains_on(1, 2, 2); }
}

TEST_SUITE("check ranks=8") {
  TEST_CASE("regression: rowwise under tp with full AC recomputes the same scales as forward" *
            doctest::test_suite("check ranks=2")) {
    // torchtitan saw A [5,8192,4096] against A_scale [40960,1] under rowwise + TP + full AC.
    // Here every FP8 operand is 2-D with its scales attached, and the recompute must rebuild
    // exactly what forward computed: the run with full AC is bit-identical to the one without.
    const std::string mesh =
        "--parallelism.dp_shard 1 --parallelism.tp 2 --training.local_batch_size 4 "
        "--float8.enabled true --float8.recipe rowwise ";
    const std::vector<double> none = run_losses("rowwise_tp_ac_none", mpirun_launcher(2),
                                                mesh + "--activation_checkpoint.mode none", 6);
    const std::vector<double> full = run_losses("rowwise_tp_ac_full", mpirun_launcher(2),
                                                mesh + "--activation_checkpoint.mode full", 6);
    for (size_t i = 0; i < none.size(); ++i) CHECK(full[i] == none[i]);
  }

  TEST_CASE(
      "regression: vocab 2256 under tp 2 refuses FP8 on the output layer and trains by default" *
      doctest::test_suite("check ranks=2")) {
    // torchtitan's test tokenizer had vocab 2256: 1128 rows per tp rank, not a multiple of 16.
    const std::string common = binary_path("titan_train") +
                               " --config configs/debug_model.yaml --training.seq_len 64"
                               " --training.steps 2 --model.vocab_size 2256 --parallelism.tp 2"
                               " --float8.enabled true";
    ProcessResult refused = run_process(mpirun_launcher(2) + common + " --float8.filter_fqns ''");
    CHECK(refused.exit_code == 2);
    CHECK_MESSAGE(refused.error_lines() == 1, refused.err);
    CHECK(refused.err.find("float8: layer 'output' has FP8 GEMM dims 1128 × 256 (out × in after "
                           "tp 2), not multiples of 16") != std::string::npos);
    ProcessResult trained = run_process(mpirun_launcher(2) + common);
    CHECK_MESSAGE(trained.exit_code == 0, trained.err);
    ProcessResult auto_filtered = run_process(mpirun_launcher(2) + common +
                                              " --float8.filter_fqns '' "
                                              "--float8.auto_filter_small_kn true");
    CHECK_MESSAGE(auto_filtered.exit_code == 0, auto_filtered.err);
    CHECK(auto_filtered.out.find("'output' stays in high precision") != std::string::npos);
  }

  TEST_CASE(
      "regression: the FSDP float8 all-gather trains on mesh (2 2 2) exactly like the plain "
      "gather" *
      doctest::test_suite("matrix ranks=8")) {
    // torchao failed here with "Cannot create a submesh from a submesh". The codes each rank
    // encodes with the whole weight's scale are the codes the FP8 linear would have computed
    // from the gathered weight, so the losses must be bit-identical — while the gather moves
    // e4m3 bytes for the FP8 linears' weights.
    const std::string mesh =
        "--parallelism.dp_replicate 2 --parallelism.dp_shard 2 --parallelism.tp 2 "
        "--training.local_batch_size 2 --float8.enabled true --float8.recipe tensorwise ";
    auto run_mesh = [&](const std::string& name, const std::string& flags, double* gathered_mib) {
      TrainingRun r = run(name, mpirun_launcher(8), mesh + flags, 5);
      const size_t at = r.process.out.find("FSDP: all-gathered ");
      REQUIRE(at != std::string::npos);
      REQUIRE(std::sscanf(r.process.out.c_str() + at, "FSDP: all-gathered %lf MiB", gathered_mib) ==
              1);
      return r.losses;
    };
    double plain_mib = 0, fp8_mib = 0, precomputed_mib = 0;
    const std::vector<double> plain = run_mesh("allgather_plain", "", &plain_mib);
    const std::vector<double> fp8 =
        run_mesh("allgather_fp8", "--float8.enable_fsdp_float8_all_gather true", &fp8_mib);
    const std::vector<double> precomputed =
        run_mesh("allgather_fp8_precomputed",
                 "--float8.enable_fsdp_float8_all_gather true "
                 "--float8.precompute_float8_dynamic_scale_for_fsdp true",
                 &precomputed_mib);
    CHECK(fp8 == plain);
    CHECK(precomputed == plain);
    MESSAGE("all-gathered per step per rank: " << plain_mib << " MiB in f32, " << fp8_mib
                                               << " MiB with e4m3 weights");
    CHECK(fp8_mib < 0.5 * plain_mib);
    CHECK(precomputed_mib == fp8_mib);
  }

  TEST_CASE("the FSDP float8 all-gather needs the tensorwise recipe" *
            doctest::test_suite("fast ranks=2")) {
    ProcessResult r =
        run_process(mpirun_launcher(2) + binary_path("titan_train") +
                    " --config configs/debug_model.yaml --training.seq_len 64"
                    " --training.steps 1 --float8.enabled true --float8.recipe rowwise"
                    " --float8.enable_fsdp_float8_all_gather true");
    CHECK(r.exit_code == 2);
    CHECK_MESSAGE(r.error_lines() == 1, r.err);
    CHECK(r.err.find("float8.enable_fsdp_float8_all_gather: needs float8.recipe tensorwise") !=
          std::string::npos);
  }
}
