// Fuzz target: a checkpoint step folder's metadata.json (checkpoint/checkpoint_reader.h:
// CheckpointReader), then reads through what it describes.
//
// The step folder also holds two data files the metadata may name, made once per process:
// rank00000.safetensors (256 bytes: 0, 1, …, 255) and rank00001.safetensors (64 bytes: 255, 254,
// …); the seeds (fuzz/corpus/fuzz_checkpoint_metadata/) describe tensors stored in them. The
// folder is step-2 because the seeds record step 2 (a step-N folder must hold step N).
//
// Contract: the constructor returns or throws InputError. An accepted metadata holds no key
// twice (json_key_oracle.h), and keeps its
// promises: every piece's byte range inside a file it names, of the size its dtype and sizes
// give; so checking every file's CRC32C and reading every tensor whole return or throw
// InputError, and never read outside the files.
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "checkpoint/checkpoint_reader.h"
#include "fuzz/fuzz_support.h"
#include "fuzz/json_key_oracle.h"

using namespace titan;

namespace {

const std::string& step_folder() {
  static const std::string folder = [] {
    std::string path = fuzz::scratch_folder() + "/step-2";
    std::filesystem::create_directories(path);
    std::vector<unsigned char> rank0(256), rank1(64);
    for (size_t i = 0; i < rank0.size(); ++i) rank0[i] = static_cast<unsigned char>(i);
    for (size_t i = 0; i < rank1.size(); ++i) rank1[i] = static_cast<unsigned char>(255 - i);
    fuzz::write_scratch_file("step-2/rank00000.safetensors", rank0.data(), rank0.size());
    fuzz::write_scratch_file("step-2/rank00001.safetensors", rank1.data(), rank1.size());
    return path;
  }();
  return folder;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& folder = step_folder();
  fuzz::write_scratch_file("step-2/metadata.json", data, size);
  std::optional<checkpoint::CheckpointReader> reader;
  if (!fuzz::fuzz_reads("CheckpointReader", [&] { reader.emplace(folder); })) return 0;
  FUZZ_REQUIRE(
      !fuzz::json_holds_key_twice(std::string_view(reinterpret_cast<const char*>(data), size)),
      "CheckpointReader", "accepted a metadata.json holding a key twice");

  const checkpoint::CheckpointMetadata& m = reader->metadata();
  for (const checkpoint::StoredFile& file : m.files) {
    FUZZ_REQUIRE(file.name.find('/') == std::string::npos && file.name != "." &&
                     file.name != "..",
                 "CheckpointReader", "a file name that is not plain: " + file.name);
  }
  for (const auto& [name, tensor] : m.tensors) {
    for (const checkpoint::StoredPiece& piece : tensor.pieces) {
      FUZZ_REQUIRE(piece.file >= 0 && static_cast<size_t>(piece.file) < m.files.size(),
                   "CheckpointReader", name + ": a piece in a file not listed");
      FUZZ_REQUIRE(piece.byte_begin <= piece.byte_end &&
                       piece.byte_end <= m.files[static_cast<size_t>(piece.file)].bytes,
                   "CheckpointReader", name + ": a piece outside its file");
    }
  }
  for (size_t i = 0; i < m.files.size(); ++i) {
    fuzz::fuzz_reads("CheckpointReader::verify_file",
                     [&] { reader->verify_file(static_cast<int64_t>(i)); });
  }
  for (const auto& entry : m.tensors) {
    const std::string& name = entry.first;  // not a structured binding: clang-14's lambdas
    const checkpoint::StoredTensor& tensor = entry.second;
    // The pieces cover the tensor, inside the files: its elements fit in the bytes named.
    if (tensor.shape.ndim() != 1 && tensor.shape.ndim() != 2) continue;
    const int64_t rows = tensor.shape[0];
    const int64_t width = tensor.shape.ndim() == 2 ? tensor.shape[1] : 1;
    if (rows <= 0 || width <= 0 || tensor.shape.numel() > (int64_t{1} << 16)) continue;
    const Tensor dst = Tensor::empty({rows, width}, tensor.dtype);
    fuzz::fuzz_reads("CheckpointReader::read_region",
                     [&] { reader->read_region(name, 0, rows, 0, width, dst); });
  }
  return 0;
}
