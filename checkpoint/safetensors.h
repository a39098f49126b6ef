// safetensors files: the format HF checkpoints use, readable by every tool in the field.
//
//   8 bytes   little-endian header length N
//   N bytes   JSON: {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, …,
//                    "__metadata__": {"key": "value", …}}, padded with spaces to 8 bytes
//   …         the tensors' bytes, offsets relative to the end of the header
//
// Files come from anywhere (a download, another tool, a disk that filled up), so the reader
// trusts nothing in them: the header length is checked against the file's size and a cap
// before anything is allocated, the JSON is parsed by simdjson, and every entry's dtype, shape
// (no overflow, at most Shape::kMaxDims dims), byte size (= dtype size × elements) and offsets
// (inside the data, no two tensors overlapping) are checked. Any problem is one InputError
// line that names the file and the problem. Reads are pread()s of exactly the bytes needed,
// so a rank can take a few rows of a 100 GB file.
//
// The writer streams: it writes the header first, from the list of {name, dtype, shape}, then
// takes the tensors' bytes in order, in as many pieces as the caller likes, so an export never
// holds more than the piece in hand.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace titan::checkpoint {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

// The largest header the reader accepts (the safetensors reference implementation's limit).
inline constexpr uint64_t kMaxSafetensorsHeaderBytes = 100ull << 20;

// "F32", "BF16", … (the format's names).
std::string safetensors_dtype_name(DType dtype);

// Whether reading `from` into `to` loses nothing: same → same, bf16 → f32, bf16 → f64,
// f32 → f64, i32 → i64.
bool converts_exactly(DType from, DType to);

struct TensorInfo {
  std::string name;
  DType dtype = DType::F32;
  Shape shape;
};

// Writes the header of `tensors` on construction, then their bytes in the order listed:
// append() takes the next bytes of the current tensor (any number of rows of it at a time;
// dtype must match), moving to the next tensor when one is complete. close() checks every
// tensor is complete, flushes and fsyncs. An object destroyed before close() leaves a file
// the reader refuses (short data): write to a temporary name and rename after close().
class SafetensorsWriter {
 public:
  SafetensorsWriter(std::string path, std::vector<TensorInfo> tensors,
                    const std::map<std::string, std::string>& metadata = {});
  ~SafetensorsWriter();
  SafetensorsWriter(const SafetensorsWriter&) = delete;
  SafetensorsWriter& operator=(const SafetensorsWriter&) = delete;

  // The bytes of `chunk` (CPU; contiguous or not) continue the current tensor.
  void append(const Tensor& chunk);
  // A whole tensor, which must be the next one listed.
  void write(const std::string& name, const Tensor& tensor);
  void close();

 private:
  void write_bytes(const void* data, uint64_t bytes);

  std::string path_;
  std::vector<TensorInfo> tensors_;
  size_t current_ = 0;           // index of the tensor being written
  uint64_t current_written_ = 0;  // its bytes written so far
  int fd_ = -1;
};

// Writes `tensors` (CPU, contiguous or not) and string metadata to `path`.
void save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata = {});

class SafetensorsFile {
 public:
  // Reads and checks the header; InputError naming the file when it is missing, malformed,
  // truncated or hostile. Copies share the open file.
  explicit SafetensorsFile(std::string path);

  const std::string& path() const { return path_; }
  bool contains(const std::string& name) const { return entries_.count(name) > 0; }
  std::vector<std::string> names() const;  // sorted
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  DType dtype(const std::string& name) const;
  Shape shape(const std::string& name) const;

  // Reads one tensor into `dst` (contiguous, CPU), which must have its shape and a dtype it
  // converts to exactly (converts_exactly).
  void read_into(const std::string& name, const Tensor& dst) const;

  // dst [rows, width] (contiguous, CPU) = rows [row_begin, + rows), columns [col_begin,
  // + width) of a 2-D tensor, converted exactly to dst's dtype. A 1-D tensor is read as
  // [n, 1] (col_begin 0, width 1). One pread when whole rows are asked for, one per row
  // otherwise. InputError naming the file for a region outside the tensor or a dtype that
  // does not convert exactly.
  void read_rows(const std::string& name, int64_t row_begin, int64_t rows, int64_t col_begin,
                 int64_t width, const Tensor& dst) const;

 private:
  struct Entry {
    DType dtype;
    Shape shape;
    uint64_t begin, end;  // relative to the end of the header
  };
  const Entry& entry(const std::string& name) const;
  // Reads `count` elements of entry `e` from element `first` into `dst` (dst_dtype).
  void read_elements(const std::string& name, const Entry& e, uint64_t first, uint64_t count,
                     DType dst_dtype, void* dst) const;

  std::string path_;
  std::shared_ptr<const int> fd_;  // closed when the last copy goes
  uint64_t data_start_ = 0;
  std::map<std::string, Entry> entries_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace titan::checkpoint
