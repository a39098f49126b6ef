// Fuzz target: a Hugging Face config.json (checkpoint/hf_files.h: read_hf_config).
//
// Contract: read_hf_config returns or throws InputError; so does check_hf_config of what it
// returns against the debug model. An accepted file holds no key twice (json_key_oracle.h). The
// config.json titan_train writes for an accepted model (hf_config_json) reads back to the same
// dims and RoPE.
#include <string>

#include "checkpoint/hf_files.h"
#include "fuzz/fuzz_support.h"
#include "fuzz/json_key_oracle.h"

using namespace titan;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = fuzz::write_scratch_file("config.json", data, size);
  checkpoint::HfConfig config;
  if (!fuzz::fuzz_reads("read_hf_config", [&] { config = checkpoint::read_hf_config(path); })) {
    return 0;
  }
  FUZZ_REQUIRE(
      !fuzz::json_holds_key_twice(std::string_view(reinterpret_cast<const char*>(data), size)),
      "read_hf_config", "accepted a config.json holding a key twice");
  fuzz::fuzz_reads("check_hf_config", [&] {
    checkpoint::check_hf_config(config, model::model_flavor("debugmodel"), path);
  });

  const model::ModelArgs& a = config.args;
  const std::string written = checkpoint::hf_config_json(a, DType::F32);
  const std::string written_path =
      fuzz::write_scratch_file("written_config.json", written.data(), written.size());
  checkpoint::HfConfig again;
  FUZZ_REQUIRE(fuzz::fuzz_reads("read_hf_config",
                                [&] { again = checkpoint::read_hf_config(written_path); }),
               "hf_config_json", "its config.json does not read back:\n" + written);
  const model::ModelArgs& b = again.args;
  FUZZ_REQUIRE(a.dim == b.dim && a.n_layers == b.n_layers && a.n_heads == b.n_heads &&
                   a.n_kv_heads == b.n_kv_heads && a.ffn_dim == b.ffn_dim &&
                   a.vocab_size == b.vocab_size && a.rope_theta == b.rope_theta &&
                   a.rope_scaling.enabled == b.rope_scaling.enabled &&
                   (!a.rope_scaling.enabled || a.rope_scaling.factor == b.rope_scaling.factor),
               "hf_config_json", "its config.json reads back as another model:\n" + written);
  return 0;
}
