// Reading a sharded checkpoint (one step folder) by global regions, on any mesh or none.
//
// docs/checkpoint.md names the layout: every rank's rank<R>.safetensors holds the pieces it
// owned, and metadata.json, written last, records for each tensor its global shape and dtype,
// and for each stored piece its global offsets and sizes, its file and its absolute byte range
// there; plus each file's size and CRC32C, the train state and the model's arguments.
//
// A reader parses and checks metadata.json once (every piece inside its file and inside its
// tensor, no two pieces of a tensor overlapping, together covering it, file names plain, sizes
// that cannot overflow): a malformed or hostile file is an InputError naming it. Reads then
// touch only the byte ranges that overlap the region asked for (pread), so a rank loading its
// shard on a new mesh reads its share of the checkpoint and no more.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
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
  DType dtype = DType::F32;
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
  int64_t optimizer_steps = 0;          // AdamW's step count (bias correction)
  int64_t loader_samples_consumed = 0;  // data::LoaderState
  model::ModelArgs model;               // the model that was saved (flavor and every dim)
  struct Mesh {                         // the mesh that saved it: informational, any mesh loads
    int64_t dp_replicate = 1, dp_shard = 1, tp = 1;
  } mesh;
  std::vector<StoredFile> files;
  std::map<std::string, StoredTensor> tensors;  // parameters by name; moments as
                                                // <name>.exp_avg, <name>.exp_avg_sq
};

// The tag and version metadata.json carries ("format", "version"); a reader refuses others.
inline constexpr char kCheckpointFormat[] = "titan_train.sharded_checkpoint";
inline constexpr int64_t kCheckpointVersion = 1;

// metadata.json's text for `metadata` (what CheckpointReader parses back).
std::string metadata_json(const CheckpointMetadata& metadata);

// CRC32C (Castagnoli; ISA-L's crc32_iscsi) of `size` bytes, continuing the CRC `crc` of what
// came before (0 to start): crc32c(b, crc32c(a)) == crc32c(a + b).
uint32_t crc32c(const void* data, size_t size, uint32_t crc = 0);

// "F32", "BF16", … (safetensors' dtype names) and back; nullopt for a name that is not one.
std::string_view stored_dtype_name(DType dtype);
std::optional<DType> parse_stored_dtype(std::string_view name);

// InputError naming `key` (the config key that chose the checkpoint), the metadata file and
// every dimension that differs, when the checkpoint was saved for another model.
void check_same_model(const CheckpointMetadata& saved, const model::ModelArgs& args,
                      const std::string& key);

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
  // where that is exact (bf16 → f32, f32 → f64, same → same; otherwise an InputError). Reads
  // only the overlapping byte ranges of the pieces.
  void read_region(const std::string& name, int64_t row_begin, int64_t rows, int64_t col_begin,
                   int64_t width, const Tensor& dst) const;

 private:
  std::string folder_;
  CheckpointChoice choice_;
  CheckpointMetadata metadata_;
};

}  // namespace titan::checkpoint
