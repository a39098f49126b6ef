// Validation: the val_loss figure and its cadence, its arithmetic against a direct
// computation, training unchanged by it (FSDP with and without resharding, activation
// checkpointing, FP8 with the float8 all-gather), the same value on every mesh, and bad
// validation config refused with exit 2 and one line.
//
// The held-out data is 20,000 bytes of the King James Bible from the middle of the book (the
// training data is the whole book: this checks the plumbing, not generalisation).
#include <doctest/doctest.h>

#include <chrono>
#include <cmath>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "app/cli.h"
#include "app/config.h"
#include "app/metrics/metrics_processor.h"
#include "core/allocator.h"
#include "core/check.h"
#include "data/token_file.h"
#include "support/metrics_file.h"
#include "support/process.h"
#include "support/training_run.h"

using namespace titan;
using namespace titan::testing;

namespace {

using Lines = std::vector<std::map<std::string, double>>;

class RecordingSink final : public app::MetricSink {
 public:
  explicit RecordingSink(std::vector<app::StepReport>* reports) : reports_(reports) {}
  void write(const app::StepReport& report) override { reports_->push_back(report); }

 private:
  std::vector<app::StepReport>* reports_;
};

app::CommandLine parse_validation(std::vector<std::string> args) {
  args.insert(args.begin(), "titan_train");
  std::vector<const char*> argv;
  for (const std::string& a : args) argv.push_back(a.c_str());
  return app::parse_command_line(static_cast<int>(argv.size()), argv.data());
}

// 20,000 bytes from the middle of corpus/kjv.txt, as a text file (held out by position only).
std::string held_out_text() {
  const std::string path = scratch_dir("validation") + "/held_out.txt";
  std::ifstream in(source_path("corpus/kjv.txt"), std::ios::binary);
  REQUIRE(in.good());
  in.seekg(2000000);
  std::string bytes(20000, '\0');
  in.read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  REQUIRE(in.gcount() == 20000);
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
  return path;
}

// The debug model at S 64 with a metrics line every step (unless `flags` says otherwise);
// every metrics line, keyed by name.
Lines run_lines(const std::string& name, const std::string& flags,
                const std::string& launcher = "") {
  train_debug_model("validation", name, "--training.seq_len 64 " + flags, launcher);
  return read_metrics_jsonl(scratch_dir("validation") + "/" + name + ".jsonl");
}

std::string validation_flags(int freq, int steps) {
  return " --validation.enable true --validation.dataset_path " + held_out_text() +
         " --validation.freq " + std::to_string(freq) + " --validation.steps " +
         std::to_string(steps);
}

// step -> val_loss, for the lines that have one.
std::map<int, double> val_losses(const Lines& lines) {
  std::map<int, double> result;
  for (const auto& line : lines) {
    auto it = line.find("val_loss");
    if (it != line.end()) result[static_cast<int>(line.at("step"))] = it->second;
  }
  return result;
}

// Each of `variants` trains 3 steps with and without validation: the training losses are the
// same, and steps 1 and 2 have a finite val_loss.
void check_validates_like_training(const std::vector<std::string>& variants) {
  for (const std::string& flags : variants) {
    CAPTURE(flags);
    const Lines plain = run_lines("variant_plain", "--training.steps 3 " + flags);
    const Lines validated =
        run_lines("variant_validated", "--training.steps 3 " + flags + validation_flags(2, 1));
    REQUIRE(validated.size() == 3);
    for (size_t i = 0; i < plain.size(); ++i) {
      CHECK(validated[i].at("loss") == plain[i].at("loss"));
    }
    const std::map<int, double> val = val_losses(validated);
    CHECK(val.size() == 2);  // steps 1 and 2
    for (const auto& [step, loss] : val) CHECK(std::isfinite(loss));
  }
}

}  // namespace

TEST_SUITE("fast") {
  TEST_CASE(
      "metrics: a validation loss joins its step's report — which reports whatever log_freq") {
    std::vector<app::StepReport> reports;
    std::vector<std::unique_ptr<app::MetricSink>> sinks;
    sinks.push_back(std::make_unique<RecordingSink>(&reports));
    app::RunFacts facts;
    facts.tokens_per_step = 1000;
    facts.first_step = 1;
    facts.last_step = 10;
    facts.log_freq = 5;
    app::MetricsProcessor processor(
        facts, allocator_for(Device::cpu()), [](double v) { return v; }, std::move(sinks),
        /*logging_rank=*/false);
    processor.start();
    for (int64_t step = 1; step <= 10; ++step) {
      if (step == 3) {
        // A validation that took the whole 60 ms of the window's wall time past step 2.
        std::this_thread::sleep_for(std::chrono::milliseconds(60));
        processor.set_validation_loss(3, 4.25, 0.060);
      }
      if (step == 5) processor.set_validation_loss(5, 3.5, 0.0);
      processor.end_step(step, 10.0 - static_cast<double>(step), 1, 1e-3);
    }
    REQUIRE(reports.size() == 4);  // 1 (the first), 3 (validated), 5, 10 (the last)
    CHECK(reports[1].step == 3);
    REQUIRE(reports[1].find("val_loss") != nullptr);
    CHECK(*reports[1].find("val_loss") == 4.25);
    CHECK(reports[1].scalars.back().name == "val_loss");  // keys are only added, at the end
    CHECK(*reports[2].find("val_loss") == 3.5);
    CHECK(reports[0].find("val_loss") == nullptr);
    CHECK(reports[3].find("val_loss") == nullptr);
    // The validation's 60 ms are not step time: steps 2 and 3 took far less than 30 ms each.
    CHECK(*reports[1].find("step_ms") < 25.0);
    CHECK(*reports[1].find("elapsed_s") >= 0.060);
  }

  TEST_CASE("config: validation keys — their defaults and their checks") {
    app::JobConfig defaults;
    CHECK_FALSE(defaults.validation.enable);
    CHECK(defaults.validation.freq == 10);
    CHECK(defaults.validation.steps == -1);
    CHECK(defaults.validation.local_batch_size == -1);
    CHECK(defaults.validation.seq_len == -1);
    CHECK(defaults.validation.dataset_path.empty());

    app::CommandLine ok =
        parse_validation({"--validation.enable", "true", "--validation.dataset_path",
                          "held_out.bin", "--validation.freq", "50", "--validation.steps", "20",
                          "--validation.local_batch_size", "2", "--validation.seq_len", "128"});
    CHECK(ok.config.validation.enable);
    CHECK(ok.config.validation.freq == 50);
    CHECK(ok.config.validation.steps == 20);

    CHECK_THROWS_WITH_AS(parse_validation({"--validation.enable", "true"}),
                         doctest::Contains("validation.dataset_path: is empty"), InputError);
    CHECK_THROWS_WITH_AS(parse_validation({"--validation.freq", "0"}),
                         doctest::Contains("validation.freq: must be positive, got 0"), InputError);
    CHECK_THROWS_WITH_AS(parse_validation({"--validation.steps", "0"}),
                         doctest::Contains("validation.steps: must be positive or -1"), InputError);
    CHECK_THROWS_WITH_AS(parse_validation({"--validation.local_batch_size", "-3"}),
                         doctest::Contains("validation.local_batch_size"), InputError);
    CHECK_THROWS_WITH_AS(parse_validation({"--validation.seq_len", "0"}),
                         doctest::Contains("validation.seq_len"), InputError);
  }
}

TEST_SUITE("check") {
  TEST_CASE("validation: val_loss on step 1 and every freq-th step — and training as without it") {
    const Lines plain = run_lines("plain", "--training.steps 7");
    const Lines validated = run_lines("validated", "--training.steps 7" + validation_flags(3, 2));
    REQUIRE(plain.size() == 7);
    REQUIRE(validated.size() == 7);
    for (size_t i = 0; i < plain.size(); ++i) {
      CHECK(validated[i].at("loss") == plain[i].at("loss"));
      CHECK(validated[i].at("grad_norm") == plain[i].at("grad_norm"));
    }
    const std::map<int, double> val = val_losses(validated);
    CHECK(val.size() == 3);
    CHECK(val.count(1) == 1);
    CHECK(val.count(3) == 1);
    CHECK(val.count(6) == 1);
    for (const auto& [step, loss] : val) CHECK(std::isfinite(loss));
    CHECK(val.at(6) < val.at(1));  // the model learns English from the rest of the book
    CHECK(val_losses(plain).empty());

    // A step that log_freq skips still reports when it validates; the log says what ran.
    TrainingRun sparse = train_debug_model("validation", "sparse",
                                           "--training.seq_len 64 --training.steps 7" +
                                               validation_flags(3, 2) + " --metrics.log_freq 5");
    const Lines lines = read_metrics_jsonl(scratch_dir("validation") + "/sparse.jsonl");
    std::vector<int> steps;
    for (const auto& line : lines) steps.push_back(static_cast<int>(line.at("step")));
    CHECK(steps == std::vector<int>{1, 3, 5, 6, 7});
    CHECK(val_losses(lines) == val);  // the same weights, the same batches: the same values
    CHECK(sparse.process.out.find("validation: step 3, loss ") != std::string::npos);
    CHECK(sparse.process.out.find(" over 2 batches (512 tokens) in ") != std::string::npos);
  }

  TEST_CASE("validation: val_loss is the training loss of the same batch at the same weights") {
    // A training stream of exactly one global batch (4 windows of 64), validated on itself: the
    // loss validation computes after step 1 is the loss step 2 trains on (the same 4 windows,
    // reshuffled, at the weights step 1 left), computed by forward() instead of evaluate().
    const std::string path = scratch_dir("validation") + "/one_batch.bin";
    std::ifstream in(source_path("corpus/kjv.txt"), std::ios::binary);
    std::vector<int32_t> tokens;
    for (int i = 0; i < 4 * 64 + 1; ++i) tokens.push_back(in.get());
    data::write_token_file(path, tokens, 256, 2);
    const Lines lines = run_lines(
        "self", "--training.steps 2 --data.path " + path +
                    " --validation.enable true --validation.freq 1 --validation.dataset_path " +
                    path);
    REQUIRE(lines.size() == 2);
    const double val = lines[0].at("val_loss"), train = lines[1].at("loss");
    CHECK(std::abs(val - train) <= 1e-8 * train);  // 9 significant digits in the JSON
    MESSAGE("val_loss after step 1 " << val << ", training loss of step 2 " << train);
    // Step 2 validates after its own update: other weights, another number.
    CHECK(lines[1].at("val_loss") != val);
  }

  TEST_CASE("validation: op AC and rowwise FP8 validate — and train as without it") {
    // Full AC and the tensorwise recipe validate in the FSDP case below; the matrix tier runs
    // them on one rank too.
    check_validates_like_training(
        {"--activation_checkpoint.mode op", "--float8.enabled true --float8.recipe rowwise"});
  }

  TEST_CASE("validation: full AC and tensorwise FP8 validate on one rank — and train as without it" *
            doctest::test_suite("matrix")) {
    check_validates_like_training(
        {"--activation_checkpoint.mode full",
         "--float8.enabled true --float8.recipe tensorwise --activation_checkpoint.mode full"});
  }

  TEST_CASE("validation: bad validation config exits 2 with one line before training") {
    const std::string held_out = held_out_text();
    check_train_rejected("--validation.enable true", {"validation.dataset_path: is empty"});
    check_train_rejected(
        "--validation.enable true --validation.dataset_path /nonexistent/held_out.txt",
        {"validation.dataset_path: '/nonexistent/held_out.txt' does not exist"});
    check_train_rejected("--validation.enable true --validation.dataset_path '/nonexistent/*.bin'",
                         {"validation.dataset_path", "matches no file"});
    check_train_rejected("--validation.freq 0", {"validation.freq: must be positive, got 0"});
    check_train_rejected("--validation.steps -2", {"validation.steps: must be positive or -1"});
    // 20,002 tokens are 78 windows of 257 (S 256): fewer than one batch of 80 sequences.
    check_train_rejected("--validation.enable true --validation.dataset_path " + held_out +
                             " --validation.local_batch_size 80",
                         {"validation.dataset_path", "fewer than one validation batch of 80"});
    check_train_rejected("--validation.enable true --validation.dataset_path " + held_out +
                             " --validation.seq_len 30000",
                         {"validation.seq_len: 30000 needs at least 30001 tokens"});
    // Held-out tokens the model's vocabulary cannot hold.
    const std::string big_vocab = scratch_dir("validation") + "/big_vocab.bin";
    data::write_token_file(big_vocab, std::vector<int32_t>(1000, 7), 4096, 2);
    check_train_rejected("--validation.enable true --validation.dataset_path " + big_vocab,
                         {"model.vocab_size: 2048", "validation.dataset_path", "at least 4096"});
  }
}

TEST_SUITE("check ranks=4") {
  TEST_CASE("validation: the same val_loss on 1 rank and on the (1 —2 —2) mesh") {
    const std::string common =
        "--training.steps 4 --training.global_batch_size 4" + validation_flags(2, 2);
    const Lines one = run_lines("mesh_one", common + " --training.local_batch_size 4");
    const Lines four = run_lines("mesh_four",
                                 common +
                                     " --training.local_batch_size 2 --parallelism.dp_shard 2"
                                     " --parallelism.tp 2",
                                 mpirun_launcher(4));
    const std::map<int, double> a = val_losses(one), b = val_losses(four);
    REQUIRE(a.size() == 3);  // steps 1, 2, 4
    REQUIRE(b.size() == 3);
    for (const auto& [step, loss] : a) {
      const double rel = std::abs(b.at(step) - loss) / loss;
      CHECK_MESSAGE(rel <= 1e-7, "step " << step << ": " << b.at(step) << " vs one rank " << loss);
      MESSAGE("step " << step << ": val_loss " << loss << ", (1,2,2) off by " << rel);
    }
  }

  TEST_CASE(
      "validation: FSDP trains as without it — kept gathered or resharded — FP8 all-gather too") {
    for (const std::string flags :
         {"--parallelism.dp_shard 2 --parallelism.tp 2 --parallelism.reshard_after_forward false"
          " --activation_checkpoint.mode full",
          "--parallelism.dp_shard 4 --float8.enabled true --float8.recipe tensorwise"
          " --float8.enable_fsdp_float8_all_gather true"
          " --float8.precompute_float8_dynamic_scale_for_fsdp true"}) {
      CAPTURE(flags);
      const std::string common = "--training.steps 3 --training.local_batch_size 2 " + flags;
      const Lines plain = run_lines("fsdp_plain", common, mpirun_launcher(4));
      const Lines validated =
          run_lines("fsdp_validated", common + validation_flags(1, 2), mpirun_launcher(4));
      REQUIRE(validated.size() == 3);
      for (size_t i = 0; i < plain.size(); ++i) {
        CHECK(validated[i].at("loss") == plain[i].at("loss"));
        CHECK(validated[i].at("grad_norm") == plain[i].at("grad_norm"));
      }
      CHECK(val_losses(validated).size() == 3);
    }
  }
}
