// Training behaviour, end to end through the binary: the debug model learns, a diverging run
// stops with its own exit code, gradient accumulation and activation checkpointing leave the
// numbers unchanged, a resumed run continues bit for bit, and both data formats train alike.
#include <doctest/doctest.h>

#include <filesystem>

#include "support/metrics_file.h"
#include "support/process.h"
#include "support/training_run.h"

using namespace titan::testing;

namespace {

const std::string kTrainingDebug = "--config configs/debug_model.yaml --metrics.log_freq 1 ";

std::vector<double> train_losses(const std::string& name, const std::string& args) {
  return train_debug_model("training", name, args).losses;
}

}  // namespace

TEST_SUITE("check") {
  TEST_CASE("the debug model learns: 200 steps end at least 40 percent below the first loss" *
            doctest::test_suite("matrix")) {
    // The acceptance command: B 4, S 256, 200 steps.
    const std::string jsonl = scratch_dir("training") + "/learns.jsonl";
    ProcessResult r =
        run_process(binary_path("titan_train") +
                    " --config configs/debug_model.yaml --training.steps 200"
                    " --training.local_batch_size 4 --training.seq_len 256 --metrics.jsonl " +
                    jsonl);
    REQUIRE_MESSAGE(r.exit_code == 0, r.err);
    auto lines = read_metrics_jsonl(jsonl);
    REQUIRE(lines.size() >= 2);
    for (const char* key : {"step", "loss", "grad_norm", "lr", "tokens_per_s",
                            "tokens_per_s_per_device", "step_ms", "peak_mem_gib", "tflops"}) {
      CHECK_MESSAGE(lines.back().count(key) == 1, key);
    }
    // The CPU has no bf16 peak and no device memory size: no MFU and no memory share.
    CHECK(lines.back().at("tflops") > 0);
    CHECK(lines.back().count("mfu") == 0);
    CHECK(lines.back().count("peak_mem_pct") == 0);
    CHECK(lines.front().at("step") == 1);
    CHECK(lines.back().at("step") == 200);
    const double first = lines.front().at("loss"), last = lines.back().at("loss");
    MESSAGE("debug model: loss " << first << " at step 1, " << last << " at step 200");
    CHECK(last <= 0.6 * first);
  }

  TEST_CASE("a diverging run stops with exit code 3 and says what to change") {
    ProcessResult r = run_process(binary_path("titan_train") + " " + kTrainingDebug +
                                  "--training.steps 5 --optimizer.lr 1e30 --training.max_norm 0 "
                                  "--lr_scheduler.warmup_steps 0");
    CHECK(r.exit_code == 3);
    const std::vector<std::string> lines = r.err_lines();
    REQUIRE(lines.size() == 1);
    CHECK(lines[0].find("training diverged") != std::string::npos);
    CHECK(lines[0].find("optimizer.lr") != std::string::npos);
  }

  TEST_CASE("gradient accumulation: 4 micro-batches of 2 train like one batch of 8") {
    std::vector<double> whole = train_losses(
        "batch8", "--training.steps 4 --training.local_batch_size 8 --training.seq_len 64");
    std::vector<double> accumulated =
        train_losses("accum",
                     "--training.steps 4 --training.local_batch_size 2 "
                     "--training.global_batch_size 8 --training.seq_len 64");
    REQUIRE(whole.size() == 4);
    REQUIRE(accumulated.size() == 4);
    for (size_t i = 0; i < whole.size(); ++i)
      CHECK(accumulated[i] == doctest::Approx(whole[i]).epsilon(1e-5));
  }

  TEST_CASE("activation checkpointing modes train identically through the command line") {
    const std::string args = "--training.steps 3 --training.seq_len 64 ";
    std::vector<double> none = train_losses("ac_none", args + "--activation_checkpoint.mode none");
    CHECK(train_losses("ac_full", args + "--activation_checkpoint.mode full") == none);
    CHECK(train_losses("ac_op", args + "--activation_checkpoint.mode op") == none);
    CHECK(train_losses("ac_sel", args + "--activation_checkpoint.mode selective "
                                        "--activation_checkpoint.selective_ac_option 3") == none);
  }

  TEST_CASE("a run resumed from its checkpoint continues bit for bit") {
    const std::string dump = scratch_dir("resume");
    std::filesystem::remove_all(dump);
    const std::string args =
        "--training.steps 6 --training.seq_len 64 --checkpoint.enable true "
        "--checkpoint.interval 3 --job.dump_folder " +
        dump + " ";
    std::vector<double> straight = train_losses("straight", args + "--checkpoint.folder straight");
    REQUIRE(straight.size() == 6);
    // The lr schedule depends on training.steps, so the interrupted run is the same 6-step run
    // with its last checkpoint removed: it resumes from step 3.
    std::filesystem::remove_all(dump + "/straight/step-6");
    CHECK(std::filesystem::is_directory(dump + "/straight/step-3"));
    std::vector<double> resumed = train_losses("resumed", args + "--checkpoint.folder straight");
    REQUIRE(resumed.size() == 3);  // steps 4, 5, 6
    for (size_t i = 0; i < 3; ++i) CHECK(resumed[i] == straight[3 + i]);
  }

  TEST_CASE("a .bin token file trains exactly like the text it was tokenized from") {
    const std::string bin = scratch_dir("training") + "/kjv.bin";
    ProcessResult tokenized = run_process(binary_path("titan_tokenize") + " corpus/kjv.txt " + bin);
    REQUIRE_MESSAGE(tokenized.exit_code == 0, tokenized.err);
    const std::string args = "--training.steps 2 --training.seq_len 64 ";
    CHECK(train_losses("from_bin", args + "--data.path " + bin) == train_losses("from_text", args));
  }

  TEST_CASE("--help lists every section and exits 0") {
    ProcessResult r = run_process(binary_path("titan_train") + " --help");
    CHECK(r.exit_code == 0);
    for (const char* section :
         {"job:", "model:", "optimizer:", "lr_scheduler:", "training:", "parallelism:", "float8:",
          "activation_checkpoint:", "checkpoint:", "data:", "metrics:"}) {
      CHECK_MESSAGE(r.out.find(section) != std::string::npos, section);
    }
    CHECK(r.out.find("--training.global_batch_size") != std::string::npos);
  }

}  // TEST_SUITE

TEST_SUITE("fast ranks=2") {
  TEST_CASE("under mpirun a set-up error prints one line from one rank and every rank exits 2") {
    ProcessResult r = run_process(mpirun_launcher(2) + binary_path("titan_train") + " " +
                                  kTrainingDebug + "--training.steps 2 --training.seq_len 0");
    CHECK(r.exit_code == 2);
    CHECK(r.error_lines() == 1);
    CHECK(r.err.find("training.seq_len: must be positive, got 0") != std::string::npos);
  }

}  // TEST_SUITE

TEST_SUITE("check") {
  TEST_CASE("--list-devices exits 0 and lists devices or says why there are none") {
    ProcessResult r = run_process(binary_path("titan_train") + " --list-devices");
    CHECK(r.exit_code == 0);
    CHECK((r.out.starts_with("cuda:0") || r.out.starts_with("no CUDA device: ")));
  }

}  // TEST_SUITE
