// Fuzz target: a Hugging Face model.safetensors.index.json (checkpoint/hf_files.h:
// read_hf_index), and the folder it describes (HfWeights).
//
// The folder also holds, made once per process, two shards the index may name:
// model-00001-of-00002.safetensors (tensor "a", F32 [2, 3]) and model-00002-of-00002.safetensors
// (tensor "b", BF16 [4]).
//
// Contract: read_hf_index and HfWeights return or throw InputError; an accepted index holds no
// key twice (json_key_oracle.h) and every shard name accepted is a plain file name (no '/', not
// "." or ".."); file_of() of every tensor the index lists returns or throws InputError.
#include <filesystem>
#include <optional>
#include <string>

#include "checkpoint/hf_files.h"
#include "fuzz/fuzz_support.h"
#include "fuzz/json_key_oracle.h"

using namespace titan;

namespace {

const std::string& hf_folder() {
  static const std::string folder = [] {
    std::string path = fuzz::scratch_folder() + "/hf";
    std::filesystem::create_directories(path);
    checkpoint::save_safetensors(path + "/model-00001-of-00002.safetensors",
                                 {{"a", Tensor::zeros({2, 3}, DType::F32)}});
    checkpoint::save_safetensors(path + "/model-00002-of-00002.safetensors",
                                 {{"b", Tensor::zeros({4}, DType::BF16)}});
    return path;
  }();
  return folder;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& folder = hf_folder();
  const std::string path =
      fuzz::write_scratch_file("hf/model.safetensors.index.json", data, size);
  std::map<std::string, std::string> weight_map;
  if (!fuzz::fuzz_reads("read_hf_index", [&] { weight_map = checkpoint::read_hf_index(path); })) {
    return 0;
  }
  FUZZ_REQUIRE(
      !fuzz::json_holds_key_twice(std::string_view(reinterpret_cast<const char*>(data), size)),
      "read_hf_index", "accepted an index holding a key twice");
  for (const auto& [tensor, file] : weight_map) {
    FUZZ_REQUIRE(!file.empty() && file.find('/') == std::string::npos && file != "." &&
                     file != "..",
                 "read_hf_index", "shard name '" + file + "' is not a plain file name");
  }
  std::optional<checkpoint::HfWeights> weights;
  if (!fuzz::fuzz_reads("HfWeights", [&] { weights.emplace(folder); })) return 0;
  for (const auto& entry : weight_map) {
    const std::string& tensor = entry.first;  // not a structured binding: clang-14's lambdas
    FUZZ_REQUIRE(weights->contains(tensor), "HfWeights", "lost tensor " + tensor);
    fuzz::fuzz_reads("HfWeights::file_of", [&] { weights->file_of(tensor); });
  }
  return 0;
}
