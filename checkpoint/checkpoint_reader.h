// Reading a sharded checkpoint (one step folder) by global regions, on any mesh or none.
//
// The folder holds the rank files and metadata.json (checkpoint_metadata.h, docs/checkpoint.md).
// A reader parses and checks metadata.json once (every piece inside its file and inside its
// tensor, no two pieces of a tensor overlapping, together covering it, file names plain, sizes
// that cannot overflow): a malformed or hostile file is an InputError naming it. Reads then
// touch only the byte ranges that overlap the region asked for, columns included, so a rank
// loading its shard on a new mesh reads its share of the checkpoint and no more; they go
// through core/range_reader.h (1 MiB preads over threads), as does the CRC32C of a file.
#pragma once

#include <cstdint>
#include <string>

#include "checkpoint/checkpoint_metadata.h"
#include "core/tensor.h"
#include "model/config.h"

namespace titan::checkpoint {

// InputError naming `key` (the config key that chose the checkpoint), the metadata file and
// every dimension that differs, when the checkpoint was saved for another model.
void check_same_model(const CheckpointMetadata& saved, const model::ModelArgs& args,
                      const std::string& key);

// InputError naming `key`, the metadata file and both optimizers, when the checkpoint's
// optimizer state was saved by another optimizer than `optimizer` (optimizer.name): AdamW's
// moments are not Muon's momentum. `weights_only` says how the caller's user takes the weights
// alone instead (titan_train: checkpoint.initial_load_model_only true).
void check_same_optimizer(const CheckpointMetadata& saved, const std::string& optimizer,
                          const std::string& key, const std::string& weights_only);

// How the caller's user picks what to read, for the reader's messages, so that each executable
// names its own options (titan_train its config keys, titan_convert its flags). An empty field
// is left out of the message.
struct CheckpointChoice {
  std::string another_step;  // what picks another step (titan_train: checkpoint.load_step)
  std::string hf_folder;     // what to do with a Hugging Face folder given as a step folder
};

class CheckpointReader {
 public:
  // Parses and checks <step_folder>/metadata.json, and that every file it names exists with
  // the recorded size. InputError naming the file and the problem otherwise.
  explicit CheckpointReader(std::string step_folder, CheckpointChoice choice = {});

  const CheckpointMetadata& metadata() const { return metadata_; }
  const std::string& folder() const { return folder_; }
  bool contains(const std::string& tensor) const;

  // Computes the CRC32C of file `file` and compares it with the recorded one: InputError
  // naming the file when they differ. (A load spreads this over the ranks: file i is checked by
  // rank i mod world, so every byte is checked once.)
  void verify_file(int64_t file) const;

  // dst [rows, width] (host; contiguous) = rows [row_begin, + rows), columns [col_begin,
  // + width) of tensor `name` (a 1-D tensor: col_begin 0, width 1), converted to dst's dtype
  // where converts_exactly (safetensors.h) allows it, otherwise an InputError. Reads only the
  // overlapping byte ranges of the pieces (whole rows of a piece as one range, a column block
  // of it as one range per row), and refuses (InputError naming the tensor, the file and the
  // element) a NaN or an infinity among the bytes it read (core/nonfinite.h).
  void read_region(const std::string& name, int64_t row_begin, int64_t rows, int64_t col_begin,
                   int64_t width, const Tensor& dst) const;

 private:
  std::string folder_;
  CheckpointChoice choice_;
  CheckpointMetadata metadata_;
};

}  // namespace titan::checkpoint
