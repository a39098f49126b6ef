// Which model --model names, and its weights, read on any mesh.
//
// Two formats, told apart by their files:
//   a titan_train step folder      metadata.json (docs/checkpoint.md), read through
//                                  checkpoint::CheckpointReader: each rank reads only the byte
//                                  ranges of its tensor-parallel slices, whatever mesh saved it;
//   a Hugging Face Llama folder    config.json + model*.safetensors (docs/hugging_face.md), read
//                                  through checkpoint::load_hf_weights (the RoPE permutation and
//                                  the wqkv/w13 fusion live there).
// A folder holding step-N folders (a run's checkpoint folder) stands for its newest complete
// step. Anything else is refused with one line.
//
// The sequence limit is the model's max_position_embeddings: config.json's for a Hugging Face
// folder (transformers' LlamaConfig default, 2048, when it has none), and for a titan_train
// checkpoint, which records no such number, the one its Hugging Face export declares
// (checkpoint::hf_config_json: 131072 with Llama 3.1's RoPE scaling, 8192 without), so that a
// checkpoint and its export have the same limit.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/dtype.h"
#include "model/config.h"
#include "model/transformer.h"

namespace titan::generate {

enum class ModelFormat { TitanCheckpoint, HuggingFace };

struct ModelSource {
  ModelFormat format = ModelFormat::TitanCheckpoint;
  std::string folder;  // the step folder, or the Hugging Face folder
  model::ModelArgs args;
  int64_t position_limit = 0;     // max_position_embeddings
  std::string default_tokenizer;  // the Hugging Face folder's tokenizer.json, else "byte"
  std::vector<std::string> notes;  // what was assumed about the model, for rank 0 to print
  std::string describe() const;  // "titan_train checkpoint …/step-200" or "Hugging Face folder …"
};

// Reads metadata.json or config.json only (and the headers of the weights' files): nothing
// large. InputError naming --model for a folder of neither format, and the file for a bad one.
ModelSource find_model(const std::string& path);

// Declares nothing: gives `model`'s parameters their tensor-parallel slices (rank of tp, as
// parallel/'s plan for training cuts them, parallel::kLlamaTpPlan), allocates them on `device`
// in `dtype` (no gradients) and fills them from the source. Each rank reads its slices only, and
// checks the CRC32C of its share of a checkpoint's files (file i on rank i mod tp).
void load_weights(const ModelSource& source, model::Transformer& model, int64_t tp_rank, int64_t tp,
                  Device device, DType dtype);

}  // namespace titan::generate
