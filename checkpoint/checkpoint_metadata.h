// metadata.json, the record of a sharded checkpoint (one step folder), as both sides share it:
// the checkpointer writes it last, once every rank's file is complete; CheckpointReader
// (checkpoint_reader.h) parses and checks it.
//
// docs/checkpoint.md names the layout: every rank's rank<R>.safetensors holds the pieces it
// owned, and metadata.json records for each tensor its global shape and dtype, and for each
// stored piece its global offsets and sizes, its file and its absolute byte range there; plus
// each file's size and CRC32C, the train state and the model's arguments.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "model/config.h"

namespace titan::checkpoint {

// A rectangle of a tensor in global coordinates, stored contiguously (row-major) in one file.
// 1-D tensors have one offset and one size.
struct StoredPiece {
  std::vector<int64_t> offsets;
  std::vector<int64_t> sizes;
  int64_t file = 0;                       // index into CheckpointMetadata::files
  uint64_t byte_begin = 0, byte_end = 0;  // absolute, within the file
};

struct StoredTensor {
  DType dtype = DType::F32;  // stored under its safetensors name (safetensors.h)
  Shape shape;
  std::vector<StoredPiece> pieces;
};

struct StoredFile {
  std::string name;  // a plain file name in the step folder: no '/', not "." or ".."
  uint64_t bytes = 0;
  uint32_t crc32c = 0;
};

// What a step folder's metadata.json holds.
struct CheckpointMetadata {
  std::string path;                     // of metadata.json, for messages (not stored)
  int64_t step = 0;                     // the last completed optimizer step
  // The optimizer that saved it (model::Optimizer::name); checkpoints from before the field
  // was written were all saved by AdamW.
  std::string optimizer = "AdamW";
  int64_t optimizer_steps = 0;          // the optimizer's step count (AdamW's bias correction)
  int64_t loader_samples_consumed = 0;  // data::LoaderState
  // A mixture's (data::LoaderState::sources): each source's own samples, by name; absent from
  // the file when empty (one data.path), so such checkpoints read as before.
  std::vector<std::pair<std::string, int64_t>> loader_sources;
  model::ModelArgs model;               // the model that was saved (flavor and every dim)
  struct Mesh {                         // the mesh that saved it: informational, any mesh loads
    int64_t pp = 1, dp_replicate = 1, dp_shard = 1, cp = 1, tp = 1;
  } mesh;
  std::vector<StoredFile> files;
  std::map<std::string, StoredTensor> tensors;  // parameters by name; the optimizer's state as
                                                // <name><suffix> (model/optim/optimizer.h)
};

// The tag and version metadata.json carries ("format", "version"); a reader refuses others.
// The rank files carry the tag too, in their safetensors __metadata__.
inline constexpr char kCheckpointFormat[] = "titan_train.sharded_checkpoint";
inline constexpr int64_t kCheckpointVersion = 1;

// metadata.json's text for `metadata` (what CheckpointReader parses back): one line per file
// and per piece, so that a person can read it and two checkpoints diff line by line.
std::string metadata_json(const CheckpointMetadata& metadata);

}  // namespace titan::checkpoint
