// The same weights under config.json in transformers 4's layout (rope_theta, rope_scaling,
// torch_dtype) and in 5's (rope_parameters, dtype), written here from a titan_convert export
// (no network): titan_generate --eval gives the same loss and greedy decoding the same tokens,
// and titan_train started from either trains the same first step, for both rope_types titan_train
// implements. The keys matter: each rope_type and each rope_theta gives its own loss, so a reader
// that missed one layout would fail these checks. A folder with neither layout is read with
// LlamaConfig's default, and says so. The refusals (unimplemented rope_types, disagreeing
// layouts) are in the bad-input census.
#include <doctest/doctest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "core/json_reader.h"
#include "support/metrics_file.h"
#include "support/process.h"
#include "support/small_model.h"

using titan::JsonDocument;
using namespace titan::testing;
namespace fs = std::filesystem;

namespace {

// One layer with grouped-query attention (2 heads over 1 kv head) of head dim 16: RoPE's eight
// frequencies, the lowest of which llama3 scaling stretches.
const std::string kDims =
    small_model_flags({.dim = 32, .n_layers = 1, .n_heads = 2, .n_kv_heads = 1, .ffn_dim = 64});

struct Exported {
  std::string dir, step, hf, held_out;
  std::string config;  // the export's config.json: transformers 4's layout, llama3 scaling
};

// One training step of a small model (llama3 RoPE scaling, titan_train's default), saved and
// exported, and held-out text to evaluate on; once per test process.
const Exported& exported() {
  static const Exported e = [] {
    Exported r;
    r.dir = scratch_dir("hf_layouts") + "/" + std::to_string(getpid());
    fs::remove_all(r.dir);
    fs::create_directories(r.dir);
    const ProcessResult train =
        run_process(binary_path("titan_train") + " --config configs/debug_model.yaml " + kDims +
                    "--training.seq_len 32 --training.local_batch_size 2 --training.steps 1 "
                    "--checkpoint.enable true --job.dump_folder " +
                    r.dir + "/job");
    REQUIRE_MESSAGE(train.exit_code == 0, train.err);
    r.step = r.dir + "/job/checkpoint/step-1";
    r.hf = r.dir + "/hf";
    const ProcessResult convert =
        run_process(binary_path("titan_convert") + " --checkpoint " + r.step + " --to-hf " + r.hf);
    REQUIRE_MESSAGE(convert.exit_code == 0, convert.err);
    r.config = read_file(r.hf + "/config.json");
    std::ifstream corpus(source_path("corpus/kjv.txt"), std::ios::binary);
    corpus.seekg(4000000);
    std::string text(3000, '\0');
    corpus.read(text.data(), static_cast<std::streamsize>(text.size()));
    r.held_out = r.dir + "/held_out.txt";
    std::ofstream(r.held_out, std::ios::binary) << text;
    return r;
  }();
  return e;
}

// `text` with its line holding `key` replaced by `line` (no newline: the line is removed).
std::string with_line(const std::string& text, const std::string& key, const std::string& line) {
  const size_t at = text.find("\n  \"" + key + "\": ");
  REQUIRE_MESSAGE(at != std::string::npos, "no ", key, " in ", text);
  const size_t end = text.find('\n', at + 1);
  return text.substr(0, at + 1) + (line.empty() ? "" : line + "\n") + text.substr(end + 1);
}

// The exported config.json's rope_scaling object's members after its rope_type ("factor": …).
std::string llama3_factors(const std::string& config) {
  const std::string from = "\"rope_type\": \"llama3\", ";
  const size_t begin = config.find(from), end = config.find('}', begin);
  REQUIRE(begin != std::string::npos);
  return config.substr(begin + from.size(), end - begin - from.size());
}

// The export's weights under config.json `config`, in a folder of their own named `name`.
std::string folder(const std::string& name, const std::string& config) {
  const Exported& e = exported();
  const std::string out = e.dir + "/" + name;
  fs::remove_all(out);
  fs::copy(e.hf, out, fs::copy_options::recursive);
  std::ofstream(out + "/config.json", std::ios::trunc) << config;
  return out;
}

// transformers 5's layout of the export's config with `rope_parameters` (the object's text).
std::string v5_config(const std::string& rope_parameters) {
  std::string c = exported().config;
  c = with_line(c, "torch_dtype", "  \"dtype\": \"float32\",");
  c = with_line(c, "rope_theta", "  \"rope_parameters\": " + rope_parameters + ",");
  return with_line(c, "rope_scaling", "");
}

std::string fixed(double loss) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.9f", loss);
  return text;
}

struct Eval {
  double loss = 0;
  std::string err;
};

// titan_generate --eval's mean loss over the held-out text, at full precision (--jsonl).
Eval eval(const std::string& model) {
  const Exported& e = exported();
  const std::string jsonl = e.dir + "/eval.jsonl";
  const ProcessResult r =
      run_process(binary_path("titan_generate") + " --model " + model + " --eval " + e.held_out +
                  " --eval-seq-len 128 --eval-batch-size 2 --eval-steps 4 "
                  "--jsonl " +
                  jsonl);
  REQUIRE_MESSAGE(r.exit_code == 0, model, ": ", r.err);
  JsonDocument document;
  REQUIRE(document.parse(read_file(jsonl)));
  return {*document.root().get_object()->find("loss")->get_double(), r.err};
}

// The greedy completions of two prompts (stdout: each prompt and its completion).
std::string greedy(const std::string& model) {
  const ProcessResult r =
      run_process(binary_path("titan_generate") + " --model " + model +
                  " --prompt 'In the beginning' --prompt 'And God said' --max-new-tokens 16 "
                  "< /dev/null");
  REQUIRE_MESSAGE(r.exit_code == 0, model, ": ", r.err);
  return r.out;
}

// The loss of the first step of titan_train started from the Hugging Face folder `hf`.
double first_step(const std::string& hf, const std::string& args) {
  const std::string out = exported().dir + "/train_" + fs::path(hf).filename().string();
  fs::remove_all(out);
  const ProcessResult r = run_process(
      binary_path("titan_train") + " --config configs/debug_model.yaml " + kDims + args +
      "--training.seq_len 32 --training.local_batch_size 2 --training.steps 1 "
      "--checkpoint.initial_load_in_hf true --checkpoint.initial_load_path " +
      hf + " --job.dump_folder " + out + " --metrics.jsonl " + out + ".jsonl");
  REQUIRE_MESSAGE(r.exit_code == 0, hf, ": ", r.err);
  const std::vector<std::map<std::string, double>> lines = read_metrics_jsonl(out + ".jsonl");
  REQUIRE(lines.size() == 1);
  return lines[0].at("loss");
}

}  // namespace

TEST_SUITE("check") {
  TEST_CASE(
      "HF layouts: transformers 5's config.json gives the --eval loss and greedy tokens and first "
      "step of 4's for both rope_types") {
    const Exported& e = exported();
    const std::string factors = llama3_factors(e.config);
    // llama3 scaling: the export as written, and transformers 5's layout of it.
    const std::string v4_llama3 = e.hf;
    const std::string v5_llama3 =
        folder("v5_llama3",
               v5_config("{\"rope_theta\": 500000.0, \"rope_type\": \"llama3\", " + factors + "}"));
    // rope_type default: the same weights read without scaling, in each layout.
    const std::string v4_default =
        folder("v4_default", with_line(e.config, "rope_scaling", "  \"rope_scaling\": null,"));
    const std::string v5_default =
        folder("v5_default", v5_config("{\"rope_theta\": 500000.0, \"rope_type\": \"default\"}"));

    const Eval checkpoint = eval(e.step);
    const Eval llama3_4 = eval(v4_llama3), llama3_5 = eval(v5_llama3);
    const Eval default_4 = eval(v4_default), default_5 = eval(v5_default);
    MESSAGE("--eval loss: llama3 ", fixed(llama3_4.loss), " (4's layout) ", fixed(llama3_5.loss),
            " (5's), checkpoint ", fixed(checkpoint.loss), "; default ", fixed(default_4.loss),
            " (4's) ", fixed(default_5.loss), " (5's)");
    CHECK(llama3_4.loss == checkpoint.loss);
    CHECK(llama3_5.loss == llama3_4.loss);
    CHECK(default_5.loss == default_4.loss);
    CHECK(default_4.loss != llama3_4.loss);  // the rope_type is read: it changes the model
    for (const Eval* run : {&llama3_4, &llama3_5, &default_4, &default_5}) {
      CHECK(run->err.find("warning") == std::string::npos);
    }

    const std::string tokens = greedy(v4_llama3);
    CHECK(greedy(v5_llama3) == tokens);
    CHECK(greedy(v5_default) == greedy(v4_default));

    // titan_train's import: the first step from either layout is the same step.
    CHECK(first_step(v5_llama3, "") == first_step(v4_llama3, ""));
    CHECK(first_step(v5_default, "--model.rope_scaling false ") ==
          first_step(v4_default, "--model.rope_scaling false "));
  }

  TEST_CASE(
      "HF layouts: a config.json with neither layout is read with LlamaConfig's rope_theta 10000 "
      "and says so") {
    const Exported& e = exported();
    const std::string neither =
        folder("neither", with_line(with_line(e.config, "rope_theta", ""), "rope_scaling", ""));
    const std::string theta_10k =
        folder("v5_theta_10k", v5_config("{\"rope_theta\": 10000.0, \"rope_type\": \"default\"}"));
    const std::string theta_500k = folder(
        "v5_theta_500k", v5_config("{\"rope_theta\": 500000.0, \"rope_type\": \"default\"}"));
    const Eval assumed = eval(neither), named = eval(theta_10k), other = eval(theta_500k);
    MESSAGE("--eval loss: neither layout ", fixed(assumed.loss), ", rope_theta 10000.0 ",
            fixed(named.loss), ", rope_theta 500000.0 ", fixed(other.loss));
    CHECK(assumed.loss == named.loss);
    CHECK(named.loss != other.loss);  // rope_theta is read: it changes the model
    CHECK(assumed.err.find("titan_generate: warning: config.json '" + neither +
                           "/config.json' names no RoPE (neither rope_parameters nor "
                           "rope_theta): LlamaConfig's default, rope_theta 10000.0 with no "
                           "frequency scaling\n") != std::string::npos);
    CHECK(named.err.find("warning") == std::string::npos);
  }
}
