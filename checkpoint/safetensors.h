// safetensors files: the format HF checkpoints use, readable by every tool in the field.
//
//   8 bytes   little-endian header length N
//   N bytes   JSON: {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, …,
//                    "__metadata__": {"key": "value", …}}, padded with spaces to 8 bytes
//   …         the tensors' bytes, offsets relative to the end of the header
//
// The header is JSON, which is YAML: yaml-cpp parses it, so no JSON library is needed.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace titan::checkpoint {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

// Writes `tensors` (CPU, contiguous or not) and string metadata to `path`.
void save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata = {});

class SafetensorsFile {
 public:
  // Reads the header; InputError naming the file when it is missing or malformed.
  explicit SafetensorsFile(std::string path);

  bool contains(const std::string& name) const { return entries_.count(name) > 0; }
  std::vector<std::string> names() const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  DType dtype(const std::string& name) const;
  Shape shape(const std::string& name) const;
  // Reads one tensor's bytes into `dst`, which must have its dtype and shape.
  void read_into(const std::string& name, const Tensor& dst) const;

 private:
  struct Entry {
    DType dtype;
    Shape shape;
    uint64_t begin, end;
  };
  const Entry& entry(const std::string& name) const;

  std::string path_;
  uint64_t data_start_ = 0;
  std::map<std::string, Entry> entries_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace titan::checkpoint
