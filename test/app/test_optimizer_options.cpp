// The optimizer's options end to end. Parameter groups (optimizer.groups) reach every
// parameter's step: a group of all of them is the top-level values it sets. AdamW's moments in
// bf16 (optimizer.state_dtype): training tracks the f32 state, a checkpoint saved with either
// resumes into either (the moments are stored as f32, bf16 widened exactly), and the plan counts
// half the optimizer state for an 8B model.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "app/cli.h"
#include "app/config_yaml.h"
#include "support/process.h"
#include "support/training_run.h"

using namespace titan::testing;
namespace fs = std::filesystem;

// Named, so that a unity build's other test files, with their own anonymous helpers, do not clash.
namespace optimizer_options_test {

constexpr const char* kScratch = "optimizer_state_dtype";
constexpr const char* kBf16 = " --optimizer.state_dtype bfloat16";
constexpr const char* kF32 = " --optimizer.state_dtype float32";

std::string dump_for(const std::string& name) {
  const std::string dump = scratch_dir(kScratch) + "/" + name;
  fs::remove_all(dump);
  return dump;
}

// `steps` steps of the debug model on one rank, sequences of 64 tokens, saving every 2 steps.
std::vector<double> train(const std::string& name, int steps, const std::string& dump,
                          const std::string& extra) {
  return train_debug_model(kScratch, name,
                           "--training.steps " + std::to_string(steps) +
                               " --training.seq_len 64 --checkpoint.enable true"
                               " --checkpoint.interval 2 --checkpoint.keep_latest_k 0"
                               " --job.dump_folder " +
                               dump + extra)
      .losses;
}

// A dump folder holding only step 2 of `saved`.
std::string copy_step_2(const std::string& saved, const std::string& name) {
  const std::string dump = dump_for(name);
  fs::create_directories(dump + "/checkpoint");
  fs::copy(saved + "/checkpoint/step-2", dump + "/checkpoint/step-2", fs::copy_options::recursive);
  return dump;
}

double relative(double a, double b) { return std::abs(a - b) / std::abs(b); }

titan::app::JobConfig parsed(std::vector<std::string> args) {
  args.insert(args.begin(), "titan_train");
  std::vector<const char*> argv;
  for (const std::string& a : args) argv.push_back(a.c_str());
  return titan::app::parse_command_line(static_cast<int>(argv.size()), argv.data()).config;
}

TEST_SUITE("fast") {
  TEST_CASE("config: optimizer.groups prints as YAML that loads back") {
    titan::app::JobConfig config =
        parsed({"--optimizer.groups",
                "[{match: norm, weight_decay: 0}, {match: '^tok_embeddings', lr_scale: 0.5}]"});
    REQUIRE(config.optimizer.groups.size() == 2);
    CHECK(config.optimizer.groups[0].weight_decay == 0.0);
    CHECK(config.optimizer.groups[1].lr_scale == 0.5);
    CHECK_FALSE(config.optimizer.groups[1].weight_decay.has_value());
    const std::string yaml = titan::app::to_yaml(config);
    CHECK(yaml.find("  groups: [{match: norm, lr_scale: 1, weight_decay: 0}, "
                    "{match: \"^tok_embeddings\", lr_scale: 0.5}]") != std::string::npos);
    const std::string path = scratch_dir(kScratch) + "/printed.yaml";
    std::ofstream(path) << yaml;
    titan::app::JobConfig back;
    titan::app::load_yaml(back, path);
    REQUIRE(back.optimizer.groups.size() == 2);
    CHECK(back.optimizer.groups[1].match == "^tok_embeddings");
    CHECK(back.optimizer.groups[1].lr_scale == 0.5);
    CHECK(back.optimizer.groups[0].weight_decay == 0.0);
    CHECK(titan::app::to_yaml(back) == yaml);
  }
}

TEST_SUITE("check") {
  TEST_CASE("parameter groups: one group of every parameter trains as the values it sets") {
    // Without checkpoints: 3 steps each.
    auto losses = [](const std::string& name, const std::string& flags) {
      return train_debug_model(kScratch, name,
                               "--training.steps 3 --training.seq_len 64 --job.dump_folder " +
                                   dump_for(name) + " " + flags)
          .losses;
    };
    const std::vector<double> plain =
        losses("groups_plain", "--optimizer.lr 4e-4 --optimizer.weight_decay 0");
    const std::vector<double> grouped =
        losses("groups_all", "--optimizer.lr 8e-4 --optimizer.weight_decay 0.1"
                             " --optimizer.groups '[{match: \".\", lr_scale: 0.5, weight_decay: 0}]'");
    const std::vector<double> untouched = losses("groups_none", "--optimizer.lr 8e-4");
    REQUIRE(plain.size() == 3);
    REQUIRE(grouped.size() == 3);
    REQUIRE(untouched.size() == 3);
    CHECK(grouped == plain);
    CHECK(grouped[2] != untouched[2]);
  }

  TEST_CASE("bf16 AdamW state: 20 steps within 0.5% of the f32 state's losses") {
    const std::vector<double> f32 = train("track_f32", 20, dump_for("track_f32"), kF32);
    const std::vector<double> bf16 = train("track_bf16", 20, dump_for("track_bf16"), kBf16);
    REQUIRE(f32.size() == 20);
    REQUIRE(bf16.size() == 20);
    // Steps 1 and 2 are the same bits: the first update reads zero moments, and the loss of
    // step 2 is the model after that update, taken with the unrounded f32 moments.
    CHECK(bf16[0] == f32[0]);
    CHECK(bf16[1] == f32[1]);
    double worst = 0;
    for (size_t i = 0; i < f32.size(); ++i) worst = std::max(worst, relative(bf16[i], f32[i]));
    CHECK_MESSAGE(worst <= 5e-3, "worst relative difference " << worst);
    CHECK_MESSAGE(bf16.back() != f32.back(), "the rounded moments changed nothing");
  }

  TEST_CASE("bf16 AdamW state: a checkpoint resumes bit for bit and into the other dtype") {
    const std::string saved_bf16 = dump_for("saved_bf16");
    const std::vector<double> straight_bf16 = train("saved_bf16", 4, saved_bf16, kBf16);
    REQUIRE(straight_bf16.size() == 4);
    const std::vector<double> same =
        train("resume_bf16", 4, copy_step_2(saved_bf16, "resume_bf16"), kBf16);
    REQUIRE(same.size() == 2);
    CHECK(same[0] == straight_bf16[2]);
    CHECK(same[1] == straight_bf16[3]);
    // Into f32 moments: the bf16 values widen exactly, so the next two steps are those of an
    // f32 state that starts from them: step 3's loss (before its update) the same bits.
    const std::vector<double> widened =
        train("resume_bf16_as_f32", 4, copy_step_2(saved_bf16, "resume_bf16_as_f32"), kF32);
    REQUIRE(widened.size() == 2);
    CHECK(widened[0] == straight_bf16[2]);
    CHECK(relative(widened[1], straight_bf16[3]) <= 1e-3);

    // f32 moments saved, resumed into bf16: rounded to nearest on the way in.
    const std::string saved_f32 = dump_for("saved_f32");
    const std::vector<double> straight_f32 = train("saved_f32", 4, saved_f32, kF32);
    REQUIRE(straight_f32.size() == 4);
    const std::vector<double> rounded =
        train("resume_f32_as_bf16", 4, copy_step_2(saved_f32, "resume_f32_as_bf16"), kBf16);
    REQUIRE(rounded.size() == 2);
    CHECK(rounded[0] == straight_f32[2]);
    CHECK(relative(rounded[1], straight_f32[3]) <= 1e-3);
  }

  TEST_CASE("bf16 AdamW state: the plan of Llama 3 8B counts half the optimizer state") {
    // The plan's "optimizer_state  59.83 GiB" line, in GiB.
    auto optimizer_gib = [](const std::string& dtype) {
      const ProcessResult plan = run_process(
          binary_path("titan_train") +
          " --config configs/llama3_8b.yaml --plan --training.device cpu"
          " --optimizer.state_dtype " +
          dtype);
      REQUIRE_MESSAGE(plan.exit_code == 0, plan.err);
      const std::string key = "optimizer_state";
      const size_t at = plan.out.find(key);
      REQUIRE_MESSAGE(at != std::string::npos, plan.out);
      return std::stod(plan.out.substr(at + key.size()));
    };
    const double f32 = optimizer_gib("float32"), bf16 = optimizer_gib("bfloat16");
    CHECK(f32 > 50);
    CHECK(bf16 == doctest::Approx(f32 / 2).epsilon(1e-3));
  }
}

}  // namespace optimizer_options_test
