// Training on a mixture (data.sources) and validating on several held-out sets
// (validation.sources), end to end with titan_train on the debug model: a run saved and
// resumed trains on the windows of an uninterrupted one, every metrics line counts each
// source's tokens (in JSON lines and TensorBoard), dp 2 trains on one rank's windows, and each
// held-out set reports its own val_loss/<name>; and the two keys print as YAML that loads back.
//
// The sources are stretches of the King James Bible as text files (the byte tokenizer), far
// enough apart that their windows differ.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "app/cli.h"
#include "app/config_yaml.h"
#include "core/check.h"
#include "support/metrics_file.h"
#include "support/process.h"
#include "support/training_run.h"

using namespace titan;
using namespace titan::testing;

namespace {

namespace fs = std::filesystem;

// `bytes` bytes of corpus/kjv.txt from `offset`, as a text file named `name`.txt.
std::string kjv_part(const std::string& name, std::streamoff offset, size_t bytes) {
  const std::string path = scratch_dir("mixture_training") + "/" + name + ".txt";
  std::ifstream in(source_path("corpus/kjv.txt"), std::ios::binary);
  REQUIRE(in.good());
  in.seekg(offset);
  std::string text(bytes, '\0');
  in.read(text.data(), static_cast<std::streamsize>(bytes));
  REQUIRE(static_cast<size_t>(in.gcount()) == bytes);
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
  return path;
}

std::string mixture_flags() {
  return "--training.seq_len 64 --data.path '' --data.sources '[{name: law, path: " +
         kjv_part("law", 0, 30000) +
         ", weight: 0.7}, {name: gospel, path: " + kjv_part("gospel", 3000000, 6000) +
         ", weight: 0.3}]' ";
}

app::JobConfig parsed(std::vector<std::string> args) {
  args.insert(args.begin(), "titan_train");
  std::vector<const char*> argv;
  for (const std::string& a : args) argv.push_back(a.c_str());
  return app::parse_command_line(static_cast<int>(argv.size()), argv.data()).config;
}

}  // namespace

TEST_SUITE("fast") {
  TEST_CASE("config: data.sources and validation.sources print as YAML that loads back") {
    app::JobConfig config =
        parsed({"--data.path", "", "--data.sources",
                "[{name: web, path: data/web, weight: 0.7}, {name: code, path: 'a b', weight: 3}]",
                "--validation.enable", "true", "--validation.sources",
                "[{name: v1, path: held/one}, {name: v2, path: held/two}]"});
    REQUIRE(config.data.sources.size() == 2);
    CHECK(config.data.sources[1].name == "code");
    CHECK(config.data.sources[1].path == "a b");
    CHECK(config.data.sources[1].weight == 3);
    REQUIRE(config.validation.sources.size() == 2);
    CHECK(config.validation.sources[1].path == "held/two");
    const std::string yaml = app::to_yaml(config);
    CHECK(yaml.find("  sources: [{name: web, path: data/web, weight: 0.7}, "
                    "{name: code, path: \"a b\", weight: 3}]") != std::string::npos);
    const std::string path = scratch_dir("mixture_config") + "/printed.yaml";
    std::ofstream(path) << yaml;
    app::JobConfig back;
    app::load_yaml(back, path);
    REQUIRE(back.data.sources.size() == 2);
    for (size_t i = 0; i < 2; ++i) {
      CHECK(back.data.sources[i].name == config.data.sources[i].name);
      CHECK(back.data.sources[i].path == config.data.sources[i].path);
      CHECK(back.data.sources[i].weight == config.data.sources[i].weight);
      CHECK(back.validation.sources[i].path == config.validation.sources[i].path);
    }
    // A held-out entry has no weight.
    CHECK_THROWS_WITH_AS(parsed({"--validation.sources", "[{name: v, path: p, weight: 1}]"}),
                         doctest::Contains("validation.sources[0]: unknown field 'weight'"),
                         InputError);
  }
}

TEST_SUITE("check") {
  TEST_CASE(
      "mixture: a run saved at step 2 and resumed trains on the windows of an uninterrupted one") {
    const std::string dump = scratch_dir("mixture_training") + "/resume_outputs";
    fs::remove_all(dump);
    // The lr schedule depends on training.steps, so the interrupted run is the same 4-step run
    // with its last checkpoint removed: it resumes from step 2.
    const std::string saving = mixture_flags() +
                               "--training.steps 4 --checkpoint.enable true "
                               "--checkpoint.interval 2 --job.dump_folder " +
                               dump;
    const TrainingRun whole = train_debug_model("mixture_training", "whole", saving);
    fs::remove_all(dump + "/checkpoint/step-4");
    REQUIRE(fs::is_directory(dump + "/checkpoint/step-2"));
    const TrainingRun resumed = train_debug_model("mixture_training", "second_half", saving);
    CHECK(resumed.process.out.find("checkpoint: resumed") != std::string::npos);
    REQUIRE(whole.losses.size() == 4);
    REQUIRE(resumed.losses.size() == 2);  // steps 3 and 4
    CHECK(resumed.losses[0] == whole.losses[2]);
    CHECK(resumed.losses[1] == whole.losses[3]);

    // Every line counts each source's tokens; they add up to the run's, a resume included.
    const auto lines = read_metrics_jsonl(scratch_dir("mixture_training") + "/whole.jsonl");
    const auto resumed_lines =
        read_metrics_jsonl(scratch_dir("mixture_training") + "/second_half.jsonl");
    for (const auto& line : lines) {
      REQUIRE(line.count("source_tokens/law") == 1);
      REQUIRE(line.count("source_tokens/gospel") == 1);
      CHECK(line.at("source_tokens/law") + line.at("source_tokens/gospel") == line.at("tokens"));
    }
    CHECK(lines.back().at("source_tokens/law") > lines.back().at("source_tokens/gospel"));
    CHECK(resumed_lines.back().at("source_tokens/law") == lines.back().at("source_tokens/law"));
    CHECK(resumed_lines.back().at("source_tokens/gospel") ==
          lines.back().at("source_tokens/gospel"));
    // The checkpoint names each source's position.
    std::ifstream metadata(dump + "/checkpoint/step-2/metadata.json");
    const std::string text((std::istreambuf_iterator<char>(metadata)),
                           std::istreambuf_iterator<char>());
    CHECK(text.find("\"loader_sources\": [{\"name\": \"law\"") != std::string::npos);
  }

  TEST_CASE("validation: two held-out sets each report val_loss/<name>") {
    const TrainingRun run = train_debug_model(
        "mixture_training", "two_sets",
        "--training.steps 2 --training.seq_len 64 --validation.enable true "
        "--validation.freq 2 --validation.steps 2 --validation.sources '[{name: psalms, path: " +
            kjv_part("psalms", 1500000, 12000) +
            "}, {name: acts, path: " + kjv_part("acts", 3500000, 12000) + "}]'");
    const auto lines = read_metrics_jsonl(scratch_dir("mixture_training") + "/two_sets.jsonl");
    REQUIRE(lines.size() == 2);
    for (const auto& line : lines) {
      REQUIRE(line.count("val_loss/psalms") == 1);
      REQUIRE(line.count("val_loss/acts") == 1);
      CHECK(line.count("val_loss") == 0);
      CHECK(std::isfinite(line.at("val_loss/psalms")));
      CHECK(line.at("val_loss/psalms") != line.at("val_loss/acts"));
    }
    CHECK(run.process.out.find("validation psalms: step 1") != std::string::npos);
    CHECK(run.process.out.find("validation acts: step 2") != std::string::npos);
  }
}

TEST_SUITE("check ranks=2") {
  TEST_CASE("mixture: dp 2 trains on the global windows of one rank") {
    const std::string common =
        mixture_flags() + "--training.steps 3 --training.global_batch_size 4 ";
    const TrainingRun one =
        train_debug_model("mixture_training", "dp_one", common + "--training.local_batch_size 4");
    const TrainingRun two = train_debug_model(
        "mixture_training", "dp_two",
        common + "--training.local_batch_size 2 --parallelism.dp_shard 2", mpirun_launcher(2));
    REQUIRE(one.losses.size() == 3);
    REQUIRE(two.losses.size() == 3);
    for (size_t i = 0; i < 3; ++i) {
      CHECK(std::abs(two.losses[i] - one.losses[i]) <= 1e-6 * one.losses[i]);
    }
    const auto a = read_metrics_jsonl(scratch_dir("mixture_training") + "/dp_one.jsonl");
    const auto b = read_metrics_jsonl(scratch_dir("mixture_training") + "/dp_two.jsonl");
    CHECK(a.back().at("source_tokens/law") == b.back().at("source_tokens/law"));
    CHECK(a.back().at("source_tokens/gospel") == b.back().at("source_tokens/gospel"));
  }
}

TEST_SUITE("check python") {
  TEST_CASE("mixture: TensorBoard scalars carry source_tokens/<name>") {
    const std::string dump = scratch_dir("mixture_training") + "/tb_outputs";
    fs::remove_all(dump);
    train_debug_model("mixture_training", "tensorboard",
                      mixture_flags() +
                          "--training.steps 2 --metrics.enable_tensorboard true "
                          "--job.dump_folder " +
                          dump);
    std::string events;
    for (const auto& entry : fs::directory_iterator(dump + "/tb")) {
      if (entry.path().filename().string().starts_with("events.")) events = entry.path().string();
    }
    REQUIRE(!events.empty());
    // Read by test/app/read_tfevents.py, which shares no code with titan_train.
    const ProcessResult read =
        run_process("/usr/bin/python3 test/app/read_tfevents.py '" + events + "'");
    REQUIRE_MESSAGE(read.exit_code == 0, read.err);
    CHECK(read.out.find("{\"step\": 2, \"tag\": \"source_tokens/law\", \"value\": ") !=
          std::string::npos);
    CHECK(read.out.find("\"tag\": \"source_tokens/gospel\"") != std::string::npos);
  }
}
