// The config: every shipped YAML loads and validates, the command line overrides the file,
// values parse strictly, and docs/config.md is exactly what the binary would print.
#include <doctest/doctest.h>

#include <fstream>
#include <sstream>

#include "app/cli.h"
#include "app/config.h"
#include "core/check.h"
#include "support/process.h"

using namespace titan;
using namespace titan::app;

namespace {

CommandLine parse(std::vector<std::string> args) {
  args.insert(args.begin(), "titan_train");
  std::vector<const char*> argv;
  for (const std::string& a : args) argv.push_back(a.c_str());
  return parse_command_line(static_cast<int>(argv.size()), argv.data());
}

std::string write_file(const std::string& name, const std::string& text) {
  std::string path = testing::scratch_dir("config") + "/" + name;
  std::ofstream(path) << text;
  return path;
}

}  // namespace

TEST_SUITE("fast") {
  TEST_CASE("every shipped config loads and validates") {
    for (const char* name : {"debug_model", "llama3_8b", "llama3_70b", "llama3_405b"}) {
      CAPTURE(name);
      JobConfig config;
      load_yaml(config, testing::source_path(std::string("configs/") + name + ".yaml"));
      CHECK_NOTHROW(validate(config));
    }
    JobConfig debug;
    load_yaml(debug, testing::source_path("configs/debug_model.yaml"));
    CHECK(debug.model.flavor == "debugmodel");
    CHECK(debug.training.seq_len == 256);
    CHECK(debug.lr_scheduler.decay_ratio == 0.8);
    JobConfig b8;
    load_yaml(b8, testing::source_path("configs/llama3_8b.yaml"));
    CHECK_FALSE(b8.lr_scheduler.decay_ratio.has_value());  // decay_ratio: null
    CHECK(b8.float8.filter_fqns == std::vector<std::string>{"output"});
  }

  TEST_CASE("comm_options: auto follows training.device and the timeout passes through") {
    auto options = [](const std::string& backend, const std::string& device) {
      JobConfig config;
      config.parallelism.comm_backend = backend;
      config.parallelism.comm_timeout_s = 42.5;
      config.training.device = device;
      validate(config);
      return comm_options(config);
    };
    CHECK(options("auto", "cpu").backend == parallel::CommBackend::Mpi);
    CHECK(options("auto", "cuda").backend == parallel::CommBackend::Nccl);
    CHECK(options("auto", "cuda:1").backend == parallel::CommBackend::Nccl);
    CHECK(options("mpi", "cuda").backend == parallel::CommBackend::Mpi);
    CHECK(options("nccl", "cuda").backend == parallel::CommBackend::Nccl);
    CHECK(options("auto", "cpu").timeout_s == 42.5);
    CHECK(JobConfig{}.parallelism.comm_timeout_s == 600);
  }

  TEST_CASE("the command line overrides the file whatever the order") {
    CommandLine cli = parse({"--training.steps", "7", "--config", "configs/debug_model.yaml",
                             "--optimizer.lr=1e-3", "--float8.filter_fqns", "output,layers.0"});
    CHECK(cli.action == CommandLine::Action::Train);
    CHECK(cli.config.training.steps == 7);
    CHECK(cli.config.optimizer.lr == 1e-3);
    CHECK(cli.config.training.seq_len == 256);  // from the file
    CHECK(cli.config.float8.filter_fqns == std::vector<std::string>{"output", "layers.0"});
    CHECK(parse({"--lr_scheduler.decay_ratio", "null"}).config.lr_scheduler.decay_ratio ==
          std::nullopt);
    CHECK(parse({"--parallelism.dp_shard", "-1"}).config.parallelism.dp_shard == -1);
    CHECK(parse({"--help"}).action == CommandLine::Action::Help);
  }

  TEST_CASE("values parse strictly and errors name the key and the value and where it came from") {
    CHECK_THROWS_WITH_AS(parse({"--training.steps", "ten"}),
                         "training.steps: expected an integer, got 'ten' (--training.steps)",
                         InputError);
    CHECK_THROWS_WITH_AS(parse({"--training.steps", "10.5"}),
                         doctest::Contains("expected an integer"), InputError);
    CHECK_THROWS_WITH_AS(parse({"--optimizer.lr", "fast"}),
                         doctest::Contains("optimizer.lr: expected a number"), InputError);
    CHECK_THROWS_WITH_AS(parse({"--checkpoint.enable", "maybe"}),
                         doctest::Contains("expected true or false"), InputError);
    CHECK_THROWS_WITH_AS(
        parse({"--training.stepz", "5"}),
        doctest::Contains("unknown flag '--training.stepz'; did you mean '--training.steps'?"),
        InputError);
    std::string yaml = write_file("typo.yaml", "training:\n  steps: 5\n  sequence_len: 4\n");
    CHECK_THROWS_WITH_AS(parse({"--config", yaml}),
                         doctest::Contains("unknown key 'training.sequence_len'"), InputError);
    std::string section = write_file("section.yaml", "trainin:\n  steps: 5\n");
    CHECK_THROWS_WITH_AS(parse({"--config", section}),
                         doctest::Contains("unknown section 'trainin'; did you mean 'training'?"),
                         InputError);
    std::string bad_type = write_file("type.yaml", "optimizer:\n  lr: fast\n");
    CHECK_THROWS_WITH_AS(parse({"--config", bad_type}), doctest::Contains("type.yaml line 2"),
                         InputError);
    std::string syntax = write_file("syntax.yaml", "training: [steps: 5\n");
    CHECK_THROWS_WITH_AS(parse({"--config", syntax}), doctest::Contains("cannot parse"),
                         InputError);
  }

  TEST_CASE("validation rejects values that cannot train and names the key and the fix") {
    CHECK_THROWS_WITH_AS(parse({"--training.local_batch_size", "0"}),
                         doctest::Contains("training.local_batch_size: must be positive, got 0"),
                         InputError);
    CHECK_THROWS_WITH_AS(parse({"--optimizer.beta2", "1.5"}), doctest::Contains("optimizer.beta2"),
                         InputError);
    CHECK_THROWS_WITH_AS(parse({"--lr_scheduler.decay_type", "step"}),
                         doctest::Contains("lr_scheduler.decay_type"), InputError);
    CHECK_THROWS_WITH_AS(parse({"--float8.recipe", "mxfp8"}), doctest::Contains("float8.recipe"),
                         InputError);
    CHECK_THROWS_WITH_AS(parse({"--model.flavor", "llama2"}), doctest::Contains("model.flavor"),
                         InputError);
    CHECK_THROWS_WITH_AS(parse({"--training.device", "tpu"}),
                         doctest::Contains("unknown device 'tpu'"), InputError);
  }

  TEST_CASE("--print-config output loads back to the same config") {
    CommandLine first =
        parse({"--config", "configs/debug_model.yaml", "--training.steps", "3", "--print-config"});
    REQUIRE(first.action == CommandLine::Action::PrintConfig);
    std::string path = write_file("printed.yaml", first.text);
    CommandLine second = parse({"--config", path, "--print-config"});
    CHECK(second.text == first.text);
  }

  TEST_CASE("--print-config escapes quotes and backslashes so its output still parses") {
    // The last ones are what fuzz_config_yaml found: YAML indicators at the start of a scalar,
    // and words YAML reads as booleans.
    for (const std::string description :
         {std::string("say \"hi\" \\ to C:\\runs\tnow: #1"), std::string("- a"),
          std::string("? x"), std::string("-"), std::string("yes"), std::string(""),
          std::string("a\x7f\x01") + "b"}) {
      CAPTURE(description);
      CommandLine first = parse({"--config", "configs/debug_model.yaml", "--job.description",
                                 description, "--print-config"});
      REQUIRE(first.action == CommandLine::Action::PrintConfig);
      CHECK(first.config.job.description == description);
      std::string path = write_file("printed_quotes.yaml", first.text);
      CommandLine second = parse({"--config", path, "--print-config"});
      CHECK(second.config.job.description == description);
      CHECK(second.text == first.text);
    }
  }

  TEST_CASE("docs/config.md is what titan_train --config-reference prints") {
    std::ifstream in(testing::source_path("docs/config.md"));
    std::stringstream text;
    text << in.rdbuf();
    CHECK_MESSAGE(text.str() == config_reference_markdown(),
                  "docs/config.md is stale: regenerate it with build/titan_train "
                  "--config-reference > docs/config.md");
  }

  TEST_CASE("closest_key suggests near misses only") {
    CHECK(closest_key("training.stpes", {"training.steps", "training.seed"}) == "training.steps");
    CHECK(closest_key("zzz", {"training.steps"}).empty());
  }

}  // TEST_SUITE
