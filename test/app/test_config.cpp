// The config: every shipped YAML loads and validates, the command line overrides the file,
// values parse strictly, and docs/config.md is exactly what the binary would print.
#include <doctest/doctest.h>

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>
#include <string_view>

#include "app/cli.h"
#include "app/closest_key.h"
#include "app/config.h"
#include "app/config_keys.h"
#include "app/config_reference.h"
#include "app/config_validate.h"
#include "app/config_yaml.h"
#include "app/layer_options.h"
#include "core/check.h"
#include "core/exit_code.h"
#include "support/process.h"
#include "support/training_run.h"

using namespace titan;
using namespace titan::app;

namespace {

CommandLine parse(std::vector<std::string> args) {
  args.insert(args.begin(), "titan_train");
  std::vector<const char*> argv;
  for (const std::string& a : args) argv.push_back(a.c_str());
  return parse_command_line(static_cast<int>(argv.size()), argv.data());
}

std::string write_config_file(const std::string& name, const std::string& text) {
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
      CommandLine cli =
          parse({"--parallelism.comm_backend", backend, "--parallelism.comm_timeout_s", "42.5",
                 "--training.device", device});  // validated
      return comm_options(cli.config);
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
    std::string yaml = write_config_file("typo.yaml", "training:\n  steps: 5\n  sequence_len: 4\n");
    CHECK_THROWS_WITH_AS(parse({"--config", yaml}),
                         doctest::Contains("unknown key 'training.sequence_len'"), InputError);
    std::string section = write_config_file("section.yaml", "trainin:\n  steps: 5\n");
    CHECK_THROWS_WITH_AS(parse({"--config", section}),
                         doctest::Contains("unknown section 'trainin'; did you mean 'training'?"),
                         InputError);
    std::string bad_type = write_config_file("type.yaml", "optimizer:\n  lr: fast\n");
    CHECK_THROWS_WITH_AS(parse({"--config", bad_type}), doctest::Contains("type.yaml line 2"),
                         InputError);
    std::string syntax = write_config_file("syntax.yaml", "training: [steps: 5\n");
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
    std::string path = write_config_file("printed.yaml", first.text);
    CommandLine second = parse({"--config", path, "--print-config"});
    CHECK(second.text == first.text);
  }

  TEST_CASE("--print-config escapes quotes and backslashes so its output still parses") {
    // The last ones are what fuzz_config_yaml found: YAML indicators at the start of a scalar,
    // and words YAML reads as booleans.
    for (const std::string& description :
         {std::string("say \"hi\" \\ to C:\\runs\tnow: #1"), std::string("- a"), std::string("? x"),
          std::string("-"), std::string("yes"), std::string(""), std::string("a\x7f\x01") + "b"}) {
      CAPTURE(description);
      CommandLine first = parse({"--config", "configs/debug_model.yaml", "--job.description",
                                 description, "--print-config"});
      REQUIRE(first.action == CommandLine::Action::PrintConfig);
      CHECK(first.config.job.description == description);
      std::string path = write_config_file("printed_quotes.yaml", first.text);
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

  TEST_CASE("config: the key table holds one row per key with help and each section in one block") {
    JobConfig config;
    std::set<std::string> paths;
    std::vector<std::string> sections;
    for (const ConfigKey& key : config_keys(config)) {
      CAPTURE(key.path());
      CHECK(paths.insert(key.path()).second);
      CHECK_FALSE(key.help.empty());
      if (sections.empty() || sections.back() != key.section) {
        CHECK(std::find(sections.begin(), sections.end(), key.section) == sections.end());
        sections.push_back(key.section);
      }
    }
    CHECK(sections == config_sections());
    CHECK(sections.size() == 16);
  }

  TEST_CASE("config: every enum-like key reads each of its names and prints it back the same") {
    int walked = 0;
    JobConfig config;
    for (const ConfigKey& key : config_keys(config)) {
      const ChoiceRef* choice = key.choice();
      if (choice == nullptr) continue;
      ++walked;
      CAPTURE(key.path());
      REQUIRE(choice->names.size() >= 2);
      for (std::string_view name : choice->names) {
        // A form with N ("cuda:N") stands for every index.
        const std::string text = name.ends_with(":N")
                                     ? std::string(name.substr(0, name.size() - 1)) + "3"
                                     : std::string(name);
        CAPTURE(text);
        set_from_text(key, text, "test");
        CHECK(key.value_text() == text);
        CHECK(key.type_name().find(name) != std::string::npos);
      }
    }
    CHECK(walked >= 9);  // the nine of today; a new one is walked by construction
    // The typed values, as the layers take them.
    CommandLine cli =
        parse({"--checkpoint.async_mode", "async_with_pinned_mem", "--lr_scheduler.decay_type",
               "cosine", "--data.format", "bin", "--checkpoint.export_dtype", "bfloat16",
               "--training.device", "cpu", "--activation_checkpoint.mode", "op"});
    CHECK(cli.config.checkpoint.async_mode == checkpoint::AsyncMode::AsyncWithPinnedMem);
    CHECK(cli.config.lr_scheduler.decay_type == model::DecayType::Cosine);
    CHECK(cli.config.data.format == data::TokenFormat::Bin);
    CHECK(cli.config.checkpoint.export_dtype == DType::BF16);
    CHECK(cli.config.training.device == Device::cpu());
    CHECK(cli.config.activation_checkpoint.mode == model::ActivationCheckpointMode::Op);
    // "cuda" alone leaves the GPU to each rank; "cuda:N" pins it.
    CHECK_FALSE(parse({"--training.device", "cuda"}).config.training.device.index_chosen());
    CHECK(parse({"--training.device", "cuda:2"}).config.training.device == Device::cuda(2));
  }

  TEST_CASE("config: \"auto\" has one reading each: by the device or by the data's path") {
    using parallel::CommBackend;
    using parallel::ParamPrecision;
    CHECK(parallel::resolve_comm_backend(CommBackend::Auto, Device::cpu()) == CommBackend::Mpi);
    CHECK(parallel::resolve_comm_backend(CommBackend::Auto, Device::cuda(1)) == CommBackend::Nccl);
    CHECK(parallel::resolve_comm_backend(CommBackend::Mpi, Device::cuda(0)) == CommBackend::Mpi);
    CHECK(parallel::resolve_param_precision(ParamPrecision::Auto, Device::cpu()) ==
          ParamPrecision::Float32);
    CHECK(parallel::resolve_param_precision(ParamPrecision::Auto, Device::cuda(0)) ==
          ParamPrecision::BFloat16);
    CHECK(parallel::resolve_param_precision(ParamPrecision::BFloat16, Device::cpu()) ==
          ParamPrecision::BFloat16);
    CHECK_FALSE(parallelize_options(JobConfig{}, Device::cpu()).bf16_gemm_operands);
    CommandLine bf16 = parse({"--training.mixed_precision_param", "bfloat16"});
    CHECK(parallelize_options(bf16.config, Device::cpu()).bf16_gemm_operands);
    CHECK(parallelize_options(bf16.config, Device::cuda(0)).placement.compute_dtype == DType::BF16);
    CHECK(data::resolve_token_format("x/tokens.bin", data::TokenFormat::Auto) ==
          data::TokenFormat::Bin);
    CHECK(data::resolve_token_format("x/corpus.txt", data::TokenFormat::Auto) ==
          data::TokenFormat::Text);
    CHECK(data::resolve_token_format("x/shards/*.bin", data::TokenFormat::Auto) ==
          data::TokenFormat::Bin);
    CHECK(data::resolve_token_format("x/tokens.bin", data::TokenFormat::Text) ==
          data::TokenFormat::Text);
  }

  TEST_CASE(
      "config: the float8 all-gather needs tensorwise and precomputing needs the all-gather") {
    CHECK_THROWS_WITH_AS(
        parse({"--float8.enabled", "true", "--float8.recipe", "rowwise",
               "--float8.enable_fsdp_float8_all_gather", "true"}),
        doctest::Contains("float8.enable_fsdp_float8_all_gather: needs float8.recipe tensorwise"),
        InputError);
    CHECK_THROWS_WITH_AS(
        parse({"--float8.precompute_float8_dynamic_scale_for_fsdp", "true"}),
        doctest::Contains("set float8.enable_fsdp_float8_all_gather: true as well"), InputError);
    CHECK_NOTHROW(parse({"--float8.enabled", "true", "--float8.enable_fsdp_float8_all_gather",
                         "true", "--float8.precompute_float8_dynamic_scale_for_fsdp", "true"}));
  }

  TEST_CASE("config: --help ends with every section of the key table and every exit code") {
    CommandLine help = parse({"--help"});
    REQUIRE(help.action == CommandLine::Action::Help);
    CHECK(help.text.find(help_footer()) != std::string::npos);
    std::string footer = help_footer();
    std::replace(footer.begin(), footer.end(), '\n', ' ');
    for (const std::string& section : config_sections()) {
      const bool listed = footer.find(section + ",") != std::string::npos ||
                          footer.find(section + " (") != std::string::npos;
      CHECK_MESSAGE(listed, section);
    }
    for (const ExitCodeMeaning& exit : kExitCodes) {
      CHECK_MESSAGE(footer.find(std::to_string(exit_status(exit.code)) + " " +
                                std::string(exit.meaning)) != std::string::npos,
                    exit.meaning);
    }
    CHECK(footer.find("75 preempted") != std::string::npos);
  }

  TEST_CASE("closest_key suggests near misses only") {
    CHECK(closest_key("training.stpes", {"training.steps", "training.seed"}) == "training.steps");
    CHECK(closest_key("zzz", {"training.steps"}).empty());
  }

}  // TEST_SUITE

TEST_SUITE("check") {
  TEST_CASE(
      "config: every enum-like key of the table refuses a bad value naming it and its values") {
    // Walks the table, so a new enum-like key is covered by construction.
    JobConfig config;
    int walked = 0;
    for (const ConfigKey& key : config_keys(config)) {
      const ChoiceRef* choice = key.choice();
      if (choice == nullptr) continue;
      ++walked;
      const std::string bad = "no_such_" + key.name;
      std::vector<std::string> fragments = {key.path() + ": ", "'" + bad + "'",
                                            "; use " + list_alternatives(choice->names)};
      for (std::string_view name : choice->names) fragments.emplace_back(name);
      testing::check_train_rejected("--" + key.path() + " " + bad, fragments);
    }
    CHECK(walked >= 9);  // the nine of today; a new one is walked by construction
  }

}  // TEST_SUITE
