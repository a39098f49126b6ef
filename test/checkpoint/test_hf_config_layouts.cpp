// config.json in transformers 4's layout (rope_theta, rope_scaling, torch_dtype at the top level)
// and 5's (rope_parameters, dtype): the same model from either; a folder holding both is read
// only when they agree; every RoPE titan_train does not implement, and every disagreement, is
// one line naming the key and the value; a folder with neither says what it assumed.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "checkpoint/hf_config_layouts.h"
#include "checkpoint/hf_files.h"
#include "core/check.h"
#include "support/process.h"

using namespace titan;
using namespace titan::checkpoint;

namespace {

// A Llama config.json of a small model with `rope` (the RoPE and dtype members, with their
// trailing commas) between its dims and its last key.
std::string config_json(const std::string& rope) {
  return "{\n  \"model_type\": \"llama\",\n  \"hidden_size\": 64,\n  \"intermediate_size\": 96,\n"
         "  \"num_hidden_layers\": 2,\n  \"num_attention_heads\": 4,\n"
         "  \"num_key_value_heads\": 2,\n  \"vocab_size\": 50,\n  \"rms_norm_eps\": 1e-05,\n" +
         rope + "  \"tie_word_embeddings\": false\n}\n";
}

const std::string kLlama3Factors =
    R"("factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, )"
    R"("original_max_position_embeddings": 8192)";
const std::string kOldLlama3 =
    "  \"rope_theta\": 500000.0,\n  \"rope_scaling\": {\"rope_type\": "
    "\"llama3\", " +
    kLlama3Factors + "},\n";
const std::string kNewLlama3 =
    "  \"rope_parameters\": {\"rope_theta\": 500000.0, \"rope_type\": "
    "\"llama3\", " +
    kLlama3Factors + "},\n";

std::string write_config(const std::string& rope) {
  static int files = 0;
  const std::string dir = testing::scratch_dir("hf_config_layouts");
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/config" + std::to_string(files++) + ".json";
  std::ofstream(path) << config_json(rope);
  return path;
}

HfConfig read(const std::string& rope) { return read_hf_config(write_config(rope)); }

// The InputError of reading a config.json with `rope`; the test fails when there is none.
std::string refusal(const std::string& rope) {
  const std::string path = write_config(rope);
  try {
    read_hf_config(path);
  } catch (const InputError& e) {
    const std::string message = e.what();
    CHECK_MESSAGE(message.starts_with("config.json '" + path + "': "), message);
    CHECK(message.find('\n') == std::string::npos);
    return message.substr(path.size() + 16);
  }
  FAIL_CHECK("no error for ", rope);
  return "";
}

void check_llama3(const model::ModelArgs& a) {
  CHECK(a.rope_theta == 500000.0);
  CHECK(a.rope_scaling.enabled);
  CHECK(a.rope_scaling.factor == 8.0);
  CHECK(a.rope_scaling.low_freq_factor == 1.0);
  CHECK(a.rope_scaling.high_freq_factor == 4.0);
  CHECK(a.rope_scaling.original_max_position == 8192.0);
}

}  // namespace

TEST_SUITE("fast") {
  TEST_CASE("HF config: transformers 4's and 5's layouts give the same model") {
    const HfConfig old_layout = read(kOldLlama3 + "  \"torch_dtype\": \"bfloat16\",\n");
    const HfConfig new_layout = read(kNewLlama3 + "  \"dtype\": \"bfloat16\",\n");
    check_llama3(old_layout.args);
    check_llama3(new_layout.args);
    CHECK(old_layout.dtype == "bfloat16");
    CHECK(new_layout.dtype == "bfloat16");
    CHECK(old_layout.assumed.empty());
    CHECK(new_layout.assumed.empty());
    // Both layouts, agreeing (a transformers 5 config of a folder transformers 4 wrote first).
    check_llama3(read(kOldLlama3 + kNewLlama3 +
                      "  \"dtype\": \"float32\",\n  \"torch_dtype\": \"float32\",\n")
                     .args);
    // No scaling: rope_type "default" (or no type) inside rope_parameters, null rope_scaling.
    for (const std::string& rope :
         {std::string("  \"rope_parameters\": {\"rope_theta\": 10000.0, \"rope_type\": "
                      "\"default\"},\n"),
          std::string("  \"rope_parameters\": {\"rope_theta\": 10000.0},\n"),
          std::string("  \"rope_theta\": 10000.0,\n  \"rope_scaling\": null,\n"),
          std::string("  \"rope_theta\": 10000.0,\n  \"rope_parameters\": {\"rope_theta\": "
                      "10000, \"type\": \"default\"},\n")}) {
      CAPTURE(rope);
      const HfConfig config = read(rope);
      CHECK(config.args.rope_theta == 10000.0);
      CHECK_FALSE(config.args.rope_scaling.enabled);
      CHECK(config.assumed.empty());
    }
    // The older spelling of rope_type, "type", in either layout.
    const std::string typed = kLlama3Factors;
    check_llama3(read("  \"rope_theta\": 500000.0,\n  \"rope_scaling\": {\"type\": \"llama3\", " +
                      typed + "},\n")
                     .args);
    check_llama3(read("  \"rope_parameters\": {\"rope_theta\": 500000.0, \"type\": \"llama3\", " +
                      typed + "},\n")
                     .args);
  }

  TEST_CASE("HF config: a folder with neither layout gets LlamaConfig's default and says so") {
    const HfConfig config = read("");
    CHECK(config.args.rope_theta == kLlamaConfigDefaultRopeTheta);
    CHECK_FALSE(config.args.rope_scaling.enabled);
    CHECK(config.dtype.empty());
    CHECK(config.assumed.find("names no RoPE (neither rope_parameters nor rope_theta): "
                              "LlamaConfig's default, rope_theta 10000.0 with no frequency "
                              "scaling") != std::string::npos);
  }

  TEST_CASE("HF config: a RoPE titan_train does not implement is refused in either layout") {
    for (const char* type : {"linear", "dynamic", "yarn", "longrope", "mrope"}) {
      CAPTURE(type);
      const std::string quoted = std::string("\"") + type + "\"";
      CHECK(refusal("  \"rope_parameters\": {\"rope_theta\": 500000.0, \"rope_type\": " + quoted +
                    ", \"factor\": 4.0},\n") ==
            "rope_parameters.rope_type: " + quoted +
                " is a RoPE titan_train does not implement: it implements \"default\" and "
                "\"llama3\" (Llama 3.1's frequency scaling); load a Llama 3 model");
      CHECK(refusal("  \"rope_theta\": 500000.0,\n  \"rope_scaling\": {\"type\": " + quoted +
                    ", \"factor\": 4.0},\n")
                .starts_with("rope_scaling.type: " + quoted +
                             " is a RoPE titan_train does not "
                             "implement"));
    }
    CHECK(refusal("  \"rope_scaling\": {\"factor\": 4.0},\n") ==
          "rope_scaling.rope_type: missing; titan_train reads \"llama3\" frequency scaling");
    CHECK(refusal("  \"rope_parameters\": {\"rope_theta\": 500000.0, \"rope_type\": \"llama3\", "
                  "\"factor\": 8.0},\n") ==
          "rope_parameters.low_freq_factor: missing; rope_type \"llama3\" needs it");
    CHECK(refusal("  \"rope_parameters\": {\"rope_theta\": -1},\n") ==
          "rope_parameters.rope_theta: expected a positive number");
    CHECK(refusal("  \"rope_parameters\": [500000.0],\n") == "rope_parameters: expected an object");
    CHECK(refusal("  \"rope_parameters\": {\"full_attention\": {\"rope_theta\": 10000.0}},\n")
              .starts_with("rope_parameters.full_attention: is an object: RoPE parameters per "
                           "layer type"));
  }

  TEST_CASE("HF config: both layouts that disagree are refused naming both keys and values") {
    const std::string disagree =
        ": the file holds RoPE in transformers 4's layout and in 5's, and they disagree "
        "(transformers 4 reads the first, 5 the second); keep the one the model was trained with "
        "and delete the other";
    CHECK(refusal("  \"rope_theta\": 500000.0,\n  \"rope_parameters\": {\"rope_theta\": "
                  "10000.0},\n") ==
          "rope_theta is 500000.0 but rope_parameters.rope_theta is 10000.0" + disagree);
    CHECK(refusal("  \"rope_scaling\": {\"rope_type\": \"llama3\", " + kLlama3Factors + "},\n" +
                  kNewLlama3) ==
          "rope_theta is absent (LlamaConfig's 10000.0) but rope_parameters.rope_theta is "
          "500000.0" +
              disagree);
    CHECK(refusal("  \"rope_theta\": 500000.0,\n" + kNewLlama3) ==
          "rope_scaling is null but rope_parameters.rope_type is \"llama3\"" + disagree);
    CHECK(refusal(kOldLlama3 + "  \"rope_parameters\": {\"rope_theta\": 500000.0, \"rope_type\": "
                               "\"default\"},\n") ==
          "rope_scaling.rope_type is \"llama3\" but rope_parameters.rope_type is \"default\"" +
              disagree);
    std::string factor32 = kNewLlama3;
    factor32.replace(factor32.find("\"factor\": 8.0"), 13, "\"factor\": 32.0");
    CHECK(refusal(kOldLlama3 + factor32) ==
          "rope_scaling.factor is 8.0 but rope_parameters.factor is 32.0" + disagree);
    CHECK(refusal("  \"dtype\": \"bfloat16\",\n  \"torch_dtype\": \"float32\",\n") ==
          "dtype is \"bfloat16\" but torch_dtype is \"float32\": the two spellings (transformers "
          "5's and 4's) disagree; keep one");
    CHECK(refusal("  \"dtype\": 16,\n") == "dtype: expected a string such as \"bfloat16\"");
  }

  TEST_CASE("HF config: the export writes transformers 4's layout and reads back the same model") {
    for (const bool scaled : {true, false}) {
      model::ModelArgs args = read(kOldLlama3).args;
      args.rope_scaling.enabled = scaled;
      const std::string text = hf_config_json(args, DType::BF16);
      CHECK(text.find("\"rope_parameters\"") == std::string::npos);
      CHECK(text.find("\"rope_theta\": 500000.0") != std::string::npos);
      const std::string path = testing::scratch_dir("hf_config_layouts") + "/exported.json";
      std::ofstream(path) << text;
      const HfConfig back = read_hf_config(path);
      CHECK(back.args.rope_theta == args.rope_theta);
      CHECK(back.args.rope_scaling.enabled == scaled);
      CHECK(back.dtype == "bfloat16");
      if (scaled) check_llama3(back.args);
    }
  }
}
