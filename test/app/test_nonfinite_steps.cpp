// Numerical faults: a NaN or Inf in the loss or the gradient norm is caught
// before the optimizer step touches the weights. By default the run stops with exit code 3;
// with training.skip_nonfinite_steps N it skips up to N such steps — the weights and AdamW
// state keep their values, a warning says so — and the checkpoint of a skipped step is never
// written. The faults are made with TITAN_FAULT_INJECT's nan_grad and nan_loss.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>

#include "support/metrics_file.h"
#include "support/process.h"

namespace titan::testing {
namespace {

namespace fs = std::filesystem;

// A short run of the debug model, checkpointing every step, validating after every step (the
// validation loss is a pure function of the weights: equal values mean equal weights).
std::string command(const std::string& fault, const std::string& dump, const std::string& args) {
  return "TITAN_FAULT_INJECT=" + fault + " " + binary_path("titan_train") +
         " --config configs/debug_model.yaml --training.seq_len 64 --training.local_batch_size 2"
         " --metrics.log_freq 1 --checkpoint.enable true --checkpoint.interval 1"
         " --validation.enable true --validation.dataset_path corpus/kjv.txt --validation.freq 1"
         " --validation.steps 1 --job.dump_folder " + dump + " --metrics.jsonl " + dump +
         "/metrics.jsonl " + args;
}

std::string fresh_dump(const std::string& name) {
  const std::string dump = scratch_dir("nonfinite") + "/" + name;
  fs::remove_all(dump);
  return dump;
}

bool saved(const std::string& dump, int step) {
  return fs::exists(dump + "/checkpoint/step-" + std::to_string(step) + "/metadata.json");
}

int count(const std::string& text, const std::string& part) {
  int n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

}  // namespace

TEST_SUITE("check") {
  TEST_CASE("a NaN gradient norm stops the run with exit code 3 before the optimizer step and names the fix") {
    const std::string dump = fresh_dump("stop");
    const ProcessResult r = run_process(command("0:3:nan_grad", dump, "--training.steps 5"));
    CHECK(r.exit_code == 3);
    const std::vector<std::string> lines = r.err_lines();
    REQUIRE(lines.size() == 1);
    CHECK(lines[0] == "titan_train: error: step 3: gradient norm is nan; training diverged; to "
                      "skip such steps instead, set training.skip_nonfinite_steps. Lower "
                      "optimizer.lr (now 0.0008) or lengthen lr_scheduler.warmup_steps (now 20), "
                      "and check training.max_norm (now 1)");
    CHECK(saved(dump, 2));
    CHECK_FALSE(saved(dump, 3));
  }

  TEST_CASE("skip_nonfinite_steps: two NaN steps are skipped with a warning each and leave the weights and their checkpoints untouched") {
    const std::string dump = fresh_dump("skip");
    const ProcessResult r = run_process(command(
        "0:3:nan_grad,0:5:nan_loss", dump, "--training.steps 6 --training.skip_nonfinite_steps 2"));
    REQUIRE_MESSAGE(r.exit_code == 0, r.err);
    CHECK(count(r.out, "step 3: gradient norm is nan; step skipped: the weights and optimizer state "
                       "keep their values, and no checkpoint of step 3 is written (1 of "
                       "training.skip_nonfinite_steps 2 used)") == 1);
    CHECK(count(r.out, "step 5: loss is nan; step skipped") == 1);

    const auto lines = read_metrics_jsonl(dump + "/metrics.jsonl");
    REQUIRE(lines.size() == 6);
    auto at = [&lines](int step, const char* key) { return lines[step - 1].at(key); };
    // Step 3's loss was fine (its gradient was not); step 5's was NaN, written as null.
    CHECK(std::isfinite(at(3, "loss")));
    CHECK(std::isnan(at(3, "grad_norm")));
    CHECK(std::isnan(at(5, "loss")));
    CHECK(lines[1].count("skipped_steps") == 0);
    CHECK(at(3, "skipped_steps") == 1);
    CHECK(at(4, "skipped_steps") == 1);
    CHECK(at(6, "skipped_steps") == 2);
    // The validation loss after a skipped step is the one before it, bit for bit: no weight
    // moved. After a step that trains, it moves.
    CHECK(at(3, "val_loss") == at(2, "val_loss"));
    CHECK(at(5, "val_loss") == at(4, "val_loss"));
    CHECK(at(4, "val_loss") != at(3, "val_loss"));
    CHECK(at(6, "val_loss") != at(5, "val_loss"));
    // The skipped steps' checkpoints are never written; the others are.
    for (int step : {1, 2, 4, 6}) CHECK_MESSAGE(saved(dump, step), "step " << step);
    CHECK_FALSE(saved(dump, 3));
    CHECK_FALSE(saved(dump, 5));
    // AdamW took 4 steps in 6: its state did not advance on the skipped ones.
    CHECK(read_file(dump + "/checkpoint/step-6/metadata.json").find("\"optimizer_steps\": 4,") !=
          std::string::npos);

    // The budget holds across a restart: resumed at step 6 with 2 skips used, a third stops it.
    const ProcessResult resumed = run_process(
        command("0:7:nan_grad", dump, "--training.steps 8 --training.skip_nonfinite_steps 2"));
    CHECK(resumed.exit_code == 3);
    const std::vector<std::string> err = resumed.err_lines();
    REQUIRE(err.size() == 1);
    CHECK(err[0].find("step 7: gradient norm is nan; training diverged after 2 skipped steps "
                      "(training.skip_nonfinite_steps 2)") != std::string::npos);
  }

  TEST_CASE("skip_nonfinite_steps: a skipped step whose checkpoint was due saves at the next step that trains") {
    const std::string dump = fresh_dump("deferred");
    const ProcessResult r = run_process(
        command("0:4:nan_loss", dump,
                "--training.steps 6 --checkpoint.interval 2 --training.skip_nonfinite_steps 1"));
    REQUIRE_MESSAGE(r.exit_code == 0, r.err);
    CHECK(saved(dump, 2));
    CHECK_FALSE(saved(dump, 4));
    CHECK(saved(dump, 5));  // step 4's save, taken after step 5 trained
    CHECK(saved(dump, 6));
  }
}

TEST_SUITE("fast ranks=2") {
  TEST_CASE("skip_nonfinite_steps: every rank skips the same step when one rank's gradient is NaN") {
    const std::string dump = fresh_dump("ranks");
    const ProcessResult r = run_process(
        "TITAN_FAULT_INJECT=1:2:nan_grad " + mpirun_launcher(2) + binary_path("titan_train") +
        " --config configs/debug_model.yaml --training.seq_len 64 --training.local_batch_size 2"
        " --metrics.log_freq 1 --checkpoint.enable true --checkpoint.interval 1 --training.steps 3"
        " --training.skip_nonfinite_steps 1 --job.dump_folder " + dump);
    REQUIRE_MESSAGE(r.exit_code == 0, r.err);
    CHECK(count(r.out + r.err, "step 2: gradient norm is nan; step skipped") == 2);  // both ranks
    CHECK(saved(dump, 1));
    CHECK_FALSE(saved(dump, 2));
    CHECK(saved(dump, 3));
    CHECK(read_file(dump + "/checkpoint/step-3/metadata.json").find("\"optimizer_steps\": 2,") !=
          std::string::npos);
  }
}

}  // namespace titan::testing
